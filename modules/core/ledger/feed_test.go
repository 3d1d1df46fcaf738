package ledger_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
	"github.com/hookledger/hookledger/modules/testsupport/ledgertest"
)

// TestFeedLinesOfTheApply: the apply writes a feed line per event when
// its logger shows info, and none when it does not.
func TestFeedLinesOfTheApply(t *testing.T) {
	t.Parallel()
	for _, level := range []zapcore.Level{zapcore.InfoLevel, zapcore.WarnLevel} {
		t.Run(level.String(), func(t *testing.T) {
			t.Parallel()
			h := ledgertest.New(t, 0, func(h *ledgertest.Harness) {
				h.Registry.Handle("stripe", "invoice.paid", func(context.Context, *ledger.Tx, *ledger.Event) error { return nil })
			})
			core, logs := observer.New(level)
			startWorker(t, h, ledger.RiverOptions{Logger: zap.New(core)})
			require.True(t, h.Claim(t, "stripe", "evt_fed", "invoice.paid", []byte(`{}`)))
			h.WaitSettled(t, "stripe", "evt_fed")
			if level > zapcore.InfoLevel {
				require.Zero(t, logs.FilterLoggerName("apply.feed").Len())
				return
			}
			dbtest.Eventually(t, func() bool { return logs.FilterLoggerName("apply.feed").Len() == 1 }, "no feed line")
			line := logs.FilterLoggerName("apply.feed").All()[0].Message
			require.True(t, strings.HasPrefix(line, "<-- invoice.paid evt_fed applied in "), line)
		})
	}
}
