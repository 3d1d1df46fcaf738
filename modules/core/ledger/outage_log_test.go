package ledger

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestContentionIsNotAnOutage: an apply that PostgreSQL ended for another
// transaction's sake (a deadlock) is retried like one the database could
// not serve, but its log line says what happened, without a warning that
// the database is unavailable.
func TestContentionIsNotAnOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err   error
		level zapcore.Level
		says  string
	}{
		{&dbError{&pgconn.PgError{Code: "40P01", Message: "deadlock detected"}}, zapcore.InfoLevel, "concurrent transaction"},
		{&dbError{errors.New("connection refused")}, zapcore.WarnLevel, "database unavailable"},
	} {
		core, logs := observer.New(zapcore.DebugLevel)
		a := &Applier{Logger: zap.New(core)}
		r := newApplyRun(a, &rivertype.JobRow{ID: 1, Attempt: 1, MaxAttempts: ApplyMaxAttempts}, []EventKey{{Namespace: "stripe", EventID: "evt_1"}}, false, false)
		err := a.report(context.Background(), r, &failure{attempt: Attempt{Seen: -1}, err: tc.err, kind: failedOutage})
		var snooze *river.JobSnoozeError
		require.ErrorAs(t, err, &snooze, "retried soon, not counted")
		require.Equal(t, 1, logs.Len())
		require.Equal(t, tc.level, logs.All()[0].Level)
		require.Contains(t, logs.All()[0].Message, tc.says)
	}
}
