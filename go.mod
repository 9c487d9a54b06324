module github.com/baton-go/baton

go 1.24

require go.uber.org/goleak v1.3.0
