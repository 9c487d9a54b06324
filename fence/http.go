package fence

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Header carries a holder's fencing token in an HTTP request, in decimal.
const Header = "Fencing-Token"

// HighestHeader carries, in a 409 Conflict answer, the largest token the
// resource has admitted for the request's name.
const HighestHeader = "Fencing-Token-Highest"

// ErrNoToken is the error of [TokenOf] for a request without a token.
var ErrNoToken = errors.New("fence: the request has no " + Header + " header")

// SetToken puts token into h: req.Header on the holder's side.
func SetToken(h http.Header, token uint64) {
	h.Set(Header, strconv.FormatUint(token, 10))
}

// TokenOf returns the token of r, ErrNoToken if it has none, or an error
// naming what is wrong with it.
func TokenOf(r *http.Request) (uint64, error) {
	vs := r.Header.Values(Header)
	switch len(vs) {
	case 0:
		return 0, ErrNoToken
	case 1:
	default:
		return 0, fmt.Errorf("fence: the request has %d %s headers, want one", len(vs), Header)
	}
	t, err := strconv.ParseUint(vs[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fence: %s %.40q is not a decimal token", Header, vs[0])
	}
	return t, nil
}

// Refuse answers a request whose token was not admitted, by err: 409
// Conflict, with HighestHeader, for a [*StaleError]; 428 Precondition
// Required for ErrNoToken; 503 Service Unavailable if the wait for the
// name's turn ended; 400 Bad Request otherwise (a malformed token).
func Refuse(w http.ResponseWriter, err error) {
	var se *StaleError
	switch {
	case errors.As(err, &se):
		w.Header().Set(HighestHeader, strconv.FormatUint(se.Highest, 10))
		http.Error(w, se.Error(), http.StatusConflict)
	case errors.Is(err, ErrNoToken):
		http.Error(w, err.Error(), http.StatusPreconditionRequired)
	case errors.Is(err, errWait):
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	default:
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
}

var errWait = errors.New("fence: gave up waiting for the name's turn")

// Middleware fences the resources behind next on g: each request's token
// (the Fencing-Token header) is admitted for the name key returns, and
// next runs within [Guard.Do], so requests for one name run one at a
// time. A request whose token is missing, malformed or stale is refused
// by [Refuse], and next does not run.
func (g *Guard) Middleware(key func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := TokenOf(r)
		if err != nil {
			Refuse(w, err)
			return
		}
		err = g.Do(r.Context(), key(r), token, func() error {
			next.ServeHTTP(w, r)
			return nil
		})
		if err != nil {
			if r.Context().Err() != nil {
				err = fmt.Errorf("%w: %w", errWait, err)
			}
			Refuse(w, err)
		}
	})
}

// ResponseError returns a [*StaleError] if resp is a refusal of a stale
// token (409 Conflict with HighestHeader), and nil otherwise: other
// answers are the caller's to judge.
func ResponseError(resp *http.Response, token uint64) error {
	if resp.StatusCode != http.StatusConflict {
		return nil
	}
	h, err := strconv.ParseUint(resp.Header.Get(HighestHeader), 10, 64)
	if err != nil {
		return nil
	}
	return &StaleError{Token: token, Highest: h}
}
