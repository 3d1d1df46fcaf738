package ledger

import "errors"

// ErrEventGone is returned when an apply job's ledger row no longer exists.
var ErrEventGone = errors.New("ledger row not found")

// permanentError marks a failure that no retry can fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a poison-payload failure: the ledger row is left
// failed with the reason and River stops retrying it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err, or anything it wraps, is Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p) || errors.Is(err, ErrEventGone)
}
