package elastic

// ParseURL exposes parseURL to the tests.
var ParseURL = parseURL
