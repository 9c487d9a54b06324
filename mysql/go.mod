module github.com/baton-go/baton/mysql

go 1.24.0

require (
	github.com/baton-go/baton v0.0.0-00010101000000-000000000000
	github.com/go-sql-driver/mysql v1.10.1
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
)

replace github.com/baton-go/baton => ../
