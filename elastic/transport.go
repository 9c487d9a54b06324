package elastic

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Transport sends one request to the cluster. Both official Go clients
// satisfy it: *opensearch.Client (opensearch-go) and *elasticsearch.Client
// (go-elasticsearch), as does [HTTPTransport]. The store builds requests
// whose URL holds only a path and a query; the transport adds the scheme,
// host and credentials.
type Transport interface {
	Perform(*http.Request) (*http.Response, error)
}

// HTTPTransport is a Transport over a plain net/http client, with basic or
// API-key authentication. [Open] builds one from a URL.
type HTTPTransport struct {
	// URL is the cluster's base URL (scheme, host, port and an optional
	// path prefix, for a cluster behind a reverse proxy).
	URL *url.URL
	// Client sends the requests; http.DefaultClient if nil.
	Client *http.Client
	// Username and Password, when Username is set, are sent as HTTP basic
	// authentication.
	Username, Password string
	// APIKey, when set, is sent as "Authorization: ApiKey <APIKey>": the
	// base64 encoding of "id:api_key", as Elasticsearch hands it out.
	APIKey string
}

// Perform sends req to t.URL.
func (t *HTTPTransport) Perform(req *http.Request) (*http.Response, error) {
	if t.URL == nil {
		return nil, errors.New("elastic: HTTPTransport has no URL")
	}
	u := *req.URL
	u.Scheme, u.Host, u.User = t.URL.Scheme, t.URL.Host, nil
	if p := strings.TrimSuffix(t.URL.Path, "/"); p != "" {
		u.Path = p + u.Path
		if u.RawPath != "" {
			u.RawPath = strings.TrimSuffix(t.URL.EscapedPath(), "/") + u.RawPath
		}
	}
	r := req.Clone(req.Context())
	r.URL, r.Host = &u, ""
	switch {
	case t.APIKey != "":
		r.Header.Set("Authorization", "ApiKey "+t.APIKey)
	case t.Username != "":
		r.SetBasicAuth(t.Username, t.Password)
	}
	c := t.Client
	if c == nil {
		c = http.DefaultClient
	}
	return c.Do(r)
}

// CloseIdleConnections closes the idle connections of t's client.
func (t *HTTPTransport) CloseIdleConnections() {
	if t.Client != nil {
		t.Client.CloseIdleConnections()
	}
}

// tlsConfig builds the TLS configuration that the URL's options ask for.
func tlsConfig(caFile, serverName string, insecure bool) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: insecure}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", caFile)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// newHTTPClient returns a client with its own connection pool, sized for
// many concurrent lock calls, and a timeout per request as a backstop for
// calls whose context has no deadline.
func newHTTPClient(tc *tls.Config, timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	tr.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: tr, Timeout: timeout}
}
