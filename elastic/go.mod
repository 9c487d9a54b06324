module github.com/baton-go/baton/elastic

go 1.24

require github.com/baton-go/baton v0.0.0-00010101000000-000000000000

replace github.com/baton-go/baton => ../
