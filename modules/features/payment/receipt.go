package payment

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/riverqueue/river"
	"go.uber.org/zap"
)

// ReceiptArgs is the payment_receipt job: one per payment.
type ReceiptArgs struct {
	PaymentID string `json:"payment_id" river:"unique"`
	Provider  string `json:"provider"`
	// Namespace is the payment's ledger namespace; empty in jobs from
	// before namespaces, which mean the provider's default one.
	Namespace string `json:"namespace,omitempty" river:"unique"`
}

// Kind names the job in River.
func (ReceiptArgs) Kind() string { return "payment_receipt" }

// InsertOpts makes a second insert for one payment a no-op as well; the
// transaction that creates the row is what guarantees one job.
func (ReceiptArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// Receipt is what a sender gets.
type Receipt struct {
	// IdempotencyKey is the payment id: the job may run more than once, and
	// the sender must send one receipt per key.
	IdempotencyKey string
	Provider       string
	CustomerID     string
	Amount         int64
	Currency       string
}

// ReceiptSender delivers receipts (mail, a billing system's API).
type ReceiptSender interface {
	SendReceipt(ctx context.Context, r Receipt) error
}

// LogSender logs receipts instead of sending them.
type LogSender struct{ Logger *zap.Logger }

// SendReceipt logs the receipt.
func (s LogSender) SendReceipt(_ context.Context, r Receipt) error {
	s.Logger.Info("receipt", zap.String("idempotency_key", r.IdempotencyKey), zap.String("customer_id", r.CustomerID),
		zap.Int64("amount", r.Amount), zap.String("currency", r.Currency))
	return nil
}

type receiptWorker struct {
	river.WorkerDefaults[ReceiptArgs]
	cfg Config
}

// Work reads the payment and hands it to the sender.
func (w *receiptWorker) Work(ctx context.Context, job *river.Job[ReceiptArgs]) error {
	r := Receipt{IdempotencyKey: job.Args.PaymentID, Provider: job.Args.Provider}
	ns := job.Args.Namespace
	if ns == "" {
		ns = job.Args.Provider
	}
	err := w.cfg.DB.QueryRowContext(ctx,
		`SELECT customer_id, amount, currency FROM payment WHERE namespace = $1 AND provider = $2 AND external_id = $3`,
		ns, job.Args.Provider, job.Args.PaymentID).Scan(&r.CustomerID, &r.Amount, &r.Currency)
	if errors.Is(err, sql.ErrNoRows) {
		return river.JobCancel(fmt.Errorf("payment %s/%s not found", job.Args.Provider, job.Args.PaymentID))
	}
	if err != nil {
		return fmt.Errorf("read payment %s: %w", job.Args.PaymentID, err)
	}
	return w.cfg.Sender.SendReceipt(ctx, r)
}
