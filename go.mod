module github.com/baton-go/baton

go 1.24
