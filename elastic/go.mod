module github.com/baton-go/baton/elastic

go 1.24

require (
	github.com/baton-go/baton v0.0.0-00010101000000-000000000000
	github.com/elastic/go-elasticsearch/v7 v7.17.10
	github.com/opensearch-project/opensearch-go/v4 v4.6.0
)

require go.uber.org/goleak v1.3.0 // indirect

replace github.com/baton-go/baton => ../
