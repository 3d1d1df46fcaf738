package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river/rivertype"
)

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

// PanicError is a handler's panic, recovered inside the apply loop.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

func stack() string { return string(debug.Stack()) }

// HandlerError is a handler's failure, named after the module and the
// handler that failed: what the ledger row's last_error, its failure log
// and River's job errors say.
type HandlerError struct {
	// Handler is "module.function", e.g. "payment.stripeChargeRefunded";
	// "module.Flush" for a module's staged writes.
	Handler string
	Err     error
}

// Error is the handler's name and its error; a panic's adds the frames of
// the stack from the panic to the handler.
func (e *HandlerError) Error() string {
	msg := e.Handler + ": " + e.Err.Error()
	var p *PanicError
	if errors.As(e.Err, &p) {
		if frames := trimStack(p.Stack); frames != "" {
			msg += "\n" + frames
		}
	}
	return msg
}

func (e *HandlerError) Unwrap() error { return e.Err }

// handlerOf names the handler a failure came from; "" when none did.
func handlerOf(err error) string {
	var h *HandlerError
	if errors.As(err, &h) {
		return h.Handler
	}
	return ""
}

// maxPanicFrames bounds the frames a panic's error text keeps.
const maxPanicFrames = 8

// trimStack keeps the frames of a debug.Stack text between the panic and
// the apply loop that ran the handler: the handler's own, at most
// maxPanicFrames of them, each as "function\n\tfile:line".
func trimStack(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	// Frames are pairs of lines after the goroutine header; the panic's
	// frame is the pair that starts with "panic(".
	start := -1
	for i := 1; i+1 < len(lines); i += 2 {
		if strings.HasPrefix(lines[i], "panic(") {
			start = i + 2
			break
		}
	}
	if start < 0 {
		return ""
	}
	var kept []string
	for i := start; i+1 < len(lines) && len(kept) < 2*maxPanicFrames; i += 2 {
		if strings.Contains(lines[i], "/modules/core/ledger.") {
			break
		}
		kept = append(kept, lines[i], lines[i+1])
	}
	return strings.Join(kept, "\n")
}

// dbError marks a failure of one of the ledger's own statements (lock,
// settle, job completion, commit), as opposed to a handler's.
type dbError struct{ err error }

func (e *dbError) Error() string { return e.err.Error() }
func (e *dbError) Unwrap() error { return e.err }

// failureKind is what a failed apply means for the event.
type failureKind int

const (
	// failedHandler: the handler failed (an error of its own, a panic, its
	// time ran out while the database answered). Recorded on the row; the
	// event backs off and is retried until the retry horizon.
	failedHandler failureKind = iota
	// failedPermanently: no retry can help; recorded, not retried.
	failedPermanently
	// failedOutage: hookledger's own database could not be reached, or
	// broke the connection, or made the statement wait (deadlock,
	// serialization, lock timeout). Not the event's fault: not recorded,
	// not an attempt, retried within seconds.
	failedOutage
	// failedStopping: the process is shutting down and cancelled the
	// apply. Not a failure: River puts the job back at once.
	failedStopping
)

func (k failureKind) String() string {
	return [...]string{"handler failure", "permanent failure", "database unavailable", "shutdown"}[k]
}

// classify tells what err, returned while applying inside tx, means. The
// question "was it our database?" is answered by our database itself:
// a handler's network error looks like a broken database connection to
// every error-type test, so the transaction is asked whether it still
// works, and the pool whether the server answers.
func classify(ctx context.Context, db *sql.DB, tx *Tx, err error) failureKind {
	var p *PanicError
	switch {
	case errors.As(err, &p):
		return failedHandler
	case IsPermanent(err):
		return failedPermanently
	case ctx.Err() != nil && !errors.Is(context.Cause(ctx), rivertype.ErrJobCancelledRemotely) && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return failedStopping
	case ctx.Err() != nil:
		// Out of time: a hung handler, or a database that stopped answering.
		if !databaseAnswers(db) {
			return failedOutage
		}
		return failedHandler
	}
	var own *dbError
	if errors.As(err, &own) {
		if IsUnavailable(err) || isContention(err) || !databaseAnswers(db) {
			return failedOutage
		}
		return failedHandler
	}
	if tx == nil {
		return failedHandler
	}
	// The handler's error. If the transaction still works, the error did
	// not come from our connection.
	_, perr := tx.ExecContext(ctx, `SELECT 1`)
	var pgErr *pgconn.PgError
	switch {
	case perr == nil:
		return failedHandler
	case isContention(err):
		// PostgreSQL refused a statement of the handler for another
		// transaction's sake: the same apply succeeds when tried again.
		return failedOutage
	case errors.As(perr, &pgErr) && pgErr.Code == "25P02" && !IsUnavailable(err):
		// A statement of the handler failed inside our transaction for a
		// reason of its own (a constraint, a cast).
		return failedHandler
	case !databaseAnswers(db):
		return failedOutage
	default:
		// The handler's statement was cut off (statement_timeout), or its
		// connection died, while the database answers: the handler's
		// failure, an attempt like any other, or it would be retried every
		// few seconds for ever, never recorded.
		return failedHandler
	}
}

// isContention reports whether PostgreSQL refused a statement for another
// transaction's sake (deadlock, serialization failure, lock timeout): the
// same apply succeeds when tried again.
func isContention(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "55P03":
			return true
		}
	}
	return false
}

// databaseAnswers reports whether the server answers a ping within a few
// seconds on a connection of the pool.
func databaseAnswers(db *sql.DB) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return db.PingContext(ctx) == nil
}
