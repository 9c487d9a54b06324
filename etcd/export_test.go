package etcd

import "time"

// Target is what parseTarget made of a target, for the tests.
type Target struct {
	Endpoints          []string
	Username, Password string
	Prefix             string
	SessionTTL         time.Duration
	DialTimeout        time.Duration
	TLS                bool
	ServerName         string
	Certs              int
}

// ParseTarget exposes parseTarget to the tests.
func ParseTarget(target string, opts *Options) (Target, error) {
	cfg, o, err := parseTarget(target, opts)
	if err != nil {
		return Target{}, err
	}
	t := Target{Endpoints: cfg.Endpoints, Username: cfg.Username, Password: cfg.Password,
		Prefix: o.Prefix, SessionTTL: o.SessionTTL, DialTimeout: cfg.DialTimeout, TLS: cfg.TLS != nil}
	if cfg.TLS != nil {
		t.ServerName, t.Certs = cfg.TLS.ServerName, len(cfg.TLS.Certificates)
	}
	return t, nil
}

// EncodeName exposes encodeName to the tests.
var EncodeName = encodeName

// Key is the key of owner's request for name.
func (s *Store) Key(name, owner string) string { return s.key(name, owner) }

// LeaseID is the store's current session lease (0 if none).
func (s *Store) LeaseID() int64 {
	if ss := s.currentSession(); ss != nil {
		return int64(ss.id)
	}
	return 0
}

// Faulty is a store with the test hooks drivertest looks for
// (drivertest.Crasher, drivertest.Partitioner).
type Faulty struct{ *Store }

func (f Faulty) Crash()                   { f.Store.crash() }
func (f Faulty) SetPartitioned(down bool) { f.Store.setPartitioned(down) }
