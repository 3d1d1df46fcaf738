package alert

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// Alert states.
const (
	StatusFiring   = "firing"
	StatusResolved = "resolved"
)

// NotifyMaxAttempts bounds the deliveries of one message; River backs off
// between them, so a receiver down for a day still gets it.
const NotifyMaxAttempts = 25

// NotifyArgs is one message, and the record of its alert's state.
type NotifyArgs struct {
	// Status is firing or resolved.
	Status string `json:"status"`
	// Alert is the rule's name.
	Alert string `json:"alert"`
	// Key names the alert's instance (the rule, and the group or source).
	Key     string `json:"key"`
	Summary string `json:"summary"`
	// Text is the message for people; with it the body is a Slack
	// incoming-webhook message.
	Text  string    `json:"text"`
	Level int       `json:"level"`
	At    time.Time `json:"at"`
}

// Kind is the notify job's kind.
func (NotifyArgs) Kind() string { return "alert_notify" }

// SignatureHeader carries the HMAC-SHA256 of the body, hex, as
// "sha256=<hex>", keyed with ALERT_WEBHOOK_SECRET's bytes.
const SignatureHeader = "X-Hookledger-Signature"

// NotifyWorker POSTs a message to the alert webhook.
type NotifyWorker struct {
	river.WorkerDefaults[NotifyArgs]
	URL string
	// Secret signs the body when set.
	Secret string
	HTTP   *http.Client
}

// Timeout bounds one delivery.
func (w *NotifyWorker) Timeout(*river.Job[NotifyArgs]) time.Duration { return 15 * time.Second }

// Work delivers the message: a 2xx answer ends it, anything else is an
// error River retries.
func (w *NotifyWorker) Work(ctx context.Context, job *river.Job[NotifyArgs]) error {
	body, err := json.Marshal(job.Args)
	if err != nil {
		return fmt.Errorf("encode alert: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("alert request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "hookledger-alerts")
	// Each attempt is signed at its own time, as Standard Webhooks
	// senders do: a receiver's tolerance checks the delivery, not the
	// change, which a retry may deliver hours later.
	if err := Sign(req.Header, w.Secret, "alert_"+strconv.FormatInt(job.ID, 10), time.Now().Unix(), body); err != nil {
		return err
	}
	resp, err := w.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("deliver alert %s: %w", job.Args.Key, redact(err, w.URL))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("deliver alert %s: the receiver answered %d", job.Args.Key, resp.StatusCode)
	}
	return nil
}

// redact keeps the webhook's URL (its path is often its token) out of an
// error River records.
func redact(err error, url string) error {
	return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), url, "ALERT_WEBHOOK_URL"))
}

// Sign sets the signature headers of body for secret (none when it is
// empty): SignatureHeader always, and the Standard Webhooks headers
// (webhook-id id, webhook-timestamp ts, webhook-signature) for a whsec_
// secret.
func Sign(h http.Header, secret, id string, ts int64, body []byte) error {
	if secret == "" {
		return nil
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	h.Set(SignatureHeader, "sha256="+hex.EncodeToString(mac.Sum(nil)))
	if !strings.HasPrefix(secret, "whsec_") {
		return nil
	}
	sig, err := provider.SignStandard(secret, id, ts, body)
	if err != nil {
		return fmt.Errorf("ALERT_WEBHOOK_SECRET: %w", err)
	}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sig)
	return nil
}
