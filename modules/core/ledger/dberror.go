package ledger

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports whether err means the database could not be reached
// or answered too late: the provider should retry.
func IsUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || // connection exception
			pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03" || // shutdown, cannot connect now
			pgErr.Code == "53300" || // too many connections
			pgErr.Code == "57014" // query cancelled (statement timeout)
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// IsBadData reports whether the event's data cannot be stored: refused
// before the claim (ErrUnstorable, ErrIncomplete) or by PostgreSQL itself (class 22, e.g.
// invalid UTF-8, or nesting past its stack limit): the delivery is a 400,
// never a retry.
func IsBadData(err error) bool {
	if errors.Is(err, ErrUnstorable) || errors.Is(err, ErrIncomplete) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "22") || pgErr.Code == "54001"
	}
	return false
}
