package alert

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"go.uber.org/zap"

	"github.com/hookledger/hookledger/modules/core/ledger"
)

// CheckArgs is the periodic check of the rules.
type CheckArgs struct{}

// Kind is the check's job kind.
func (CheckArgs) Kind() string { return "alert_check" }

// CheckWorker runs the rules and inserts a notify job for each alert whose
// state changed since its last message.
type CheckWorker struct {
	river.WorkerDefaults[CheckArgs]
	DB     *sql.DB
	Rules  *Rules
	Logger *zap.Logger
}

// lockKey is the advisory lock that makes checks take turns: a second
// leader's check, or one started twice, reads the state the first wrote.
const lockKey = 0x686f6f6b_616c7274 // "hookalrt"

// stateSQL reads the last message of each alert from alert_state, which
// the check writes in the transaction that inserts the message's notify
// job: the state outlives River's retention of the jobs.
const stateSQL = `SELECT key, status, level FROM alert_state`

// recordSQL records the messages' states: $1 their keys, $2 the rules'
// names, $3 the statuses, $4 the levels, $5 the summaries, all at $6. A
// firing alert keeps the time it started firing while it grows a level;
// a resolved one keeps its last firing level and the time it fired.
const recordSQL = `
	INSERT INTO alert_state AS s (key, name, status, level, summary, fired_at, resolved_at, updated_at)
	SELECT m.key, m.name, m.status, m.level, m.summary, $6, CASE WHEN m.status = 'resolved' THEN $6::timestamptz END, $6
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[]) AS m(key, name, status, level, summary)
	ON CONFLICT (key) DO UPDATE SET
		name = EXCLUDED.name,
		status = EXCLUDED.status,
		level = CASE WHEN EXCLUDED.status = 'firing' THEN EXCLUDED.level ELSE s.level END,
		summary = EXCLUDED.summary,
		fired_at = CASE WHEN EXCLUDED.status = 'firing' AND s.status <> 'firing' THEN EXCLUDED.fired_at ELSE s.fired_at END,
		resolved_at = EXCLUDED.resolved_at,
		updated_at = EXCLUDED.updated_at`

// last is an alert's last message.
type last struct {
	status string
	level  int
}

// Work checks the rules and sends what changed.
func (w *CheckWorker) Work(ctx context.Context, job *river.Job[CheckArgs]) error {
	firing, err := w.Rules.Firing(ctx)
	if err != nil {
		return err
	}
	client := river.ClientFromContext[*sql.Tx](ctx)
	return ledger.InTx(ctx, w.DB, func(tx *ledger.Tx) error {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(lockKey)); err != nil {
			return fmt.Errorf("alert lock: %w", err)
		}
		prev, err := readState(ctx, tx.Tx)
		if err != nil {
			return err
		}
		msgs := changes(firing, prev, time.Now())
		if len(msgs) == 0 {
			return nil
		}
		if err := record(ctx, tx.Tx, msgs); err != nil {
			return err
		}
		params := make([]river.InsertManyParams, len(msgs))
		for i, m := range msgs {
			params[i] = river.InsertManyParams{Args: m, InsertOpts: &river.InsertOpts{MaxAttempts: NotifyMaxAttempts}}
			w.Logger.Info("alert "+m.Status, zap.String("alert", m.Alert), zap.String("key", m.Key), zap.String("summary", m.Summary))
		}
		if _, err := client.InsertManyTx(ctx, tx.Tx, params); err != nil {
			return fmt.Errorf("insert alert messages: %w", err)
		}
		return nil
	})
}

func readState(ctx context.Context, tx *sql.Tx) (map[string]last, error) {
	rows, err := tx.QueryContext(ctx, stateSQL)
	if err != nil {
		return nil, fmt.Errorf("read alert state: %w", err)
	}
	defer rows.Close()
	prev := map[string]last{}
	for rows.Next() {
		var (
			key string
			l   last
		)
		if err := rows.Scan(&key, &l.status, &l.level); err != nil {
			return nil, fmt.Errorf("read alert state: %w", err)
		}
		prev[key] = l
	}
	return prev, rows.Err()
}

// record writes the state each message sends to alert_state.
func record(ctx context.Context, tx *sql.Tx, msgs []NotifyArgs) error {
	keys, names, statuses, summaries := make([]string, len(msgs)), make([]string, len(msgs)), make([]string, len(msgs)), make([]string, len(msgs))
	levels := make([]int64, len(msgs))
	for i, m := range msgs {
		keys[i], names[i], statuses[i], levels[i], summaries[i] = m.Key, m.Alert, m.Status, int64(m.Level), m.Summary
	}
	if _, err := tx.ExecContext(ctx, recordSQL, keys, names, statuses, levels, summaries, msgs[0].At); err != nil {
		return fmt.Errorf("record alert state: %w", err)
	}
	return nil
}

// changes are the messages that take the alerts from prev to firing: a
// firing message for an alert that was not firing or grew a level, a
// resolved one for an alert that fired and no longer does.
func changes(firing []Alert, prev map[string]last, now time.Time) []NotifyArgs {
	var out []NotifyArgs
	now = now.UTC().Truncate(time.Second)
	seen := map[string]bool{}
	for _, a := range firing {
		seen[a.Key] = true
		p, ok := prev[a.Key]
		if ok && p.status == StatusFiring && a.Level <= p.level {
			continue
		}
		out = append(out, NotifyArgs{Status: StatusFiring, Alert: a.Name, Key: a.Key, Summary: a.Summary, Level: a.Level, At: now,
			Text: fmt.Sprintf("[FIRING] hookledger %s: %s", a.Name, a.Summary)})
	}
	keys := make([]string, 0, len(prev))
	for k, p := range prev {
		if p.status == StatusFiring && !seen[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		name, _, _ := strings.Cut(k, ":")
		summary := "no longer firing: " + k
		out = append(out, NotifyArgs{Status: StatusResolved, Alert: name, Key: k, Summary: summary, At: now,
			Text: fmt.Sprintf("[RESOLVED] hookledger %s: %s", name, summary)})
	}
	return out
}
