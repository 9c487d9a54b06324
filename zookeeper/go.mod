module github.com/baton-go/baton/zookeeper

go 1.24

require github.com/baton-go/baton v0.0.0-00010101000000-000000000000

require github.com/go-zookeeper/zk v1.0.4

require go.uber.org/goleak v1.3.0 // indirect

replace github.com/baton-go/baton => ../
