package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/devdb"
	"github.com/hookledger/hookledger/modules/provider"
)

// cmdDev serves with development defaults against DATABASE_URL, else a
// local PostgreSQL, else a throwaway cluster it starts in the project.
func cmdDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := parseFlags(newFlags("dev", stderr), args); err != nil {
		return err
	}
	cfg, err := config.LoadDev()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	if cfg.DatabaseURL == "" {
		url, err := devDatabase(ctx, stderr)
		if err != nil {
			return err
		}
		cfg.DatabaseURL = config.Secret(url)
	}
	if err := migrate(ctx, cfg.DatabaseURL.Reveal(), "up", false, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "hookledger dev: http://%s  database %s  sources %s\n",
		localAddr(cfg.HTTPAddr), config.RedactURL(cfg.DatabaseURL.Reveal()), sourceNames(cfg))
	fmt.Fprintf(stdout, "send a signed test event:  go tool task send   (or: go run ./app/cmd/hookledger send)\n")
	return serve(ctx, cfg, config.RoleAll)
}

// cmdDevDB prints DATABASE_URL, or the URL of the development database on
// a local or throwaway server.
func cmdDevDB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := parseFlags(newFlags("devdb", stderr), args); err != nil {
		return err
	}
	cfg, err := config.LoadDev()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	url := cfg.DatabaseURL.Reveal()
	if url == "" {
		if url, err = devDatabase(ctx, stderr); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, url)
	return nil
}

func devDatabase(ctx context.Context, stderr io.Writer) (string, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	admin, err := devdb.Server(ctx, "", logf)
	if err != nil {
		return "", err
	}
	return devdb.EnsureDatabase(ctx, admin, "hookledger")
}

// cmdSend posts one signed Stripe event, by default a
// customer.subscription.created with a fresh id.
func cmdSend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := config.LoadDev()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	secret := config.DevSecret
	if s, ok := cfg.Source("stripe"); ok {
		secret = s.Secrets[0].Reveal()
	}
	fs := newFlags("send", stderr)
	url := fs.String("url", "http://"+localAddr(cfg.HTTPAddr)+"/webhooks/stripe", "receiver URL")
	eventType := fs.String("type", "customer.subscription.created", "event type of the generated event")
	bodyFile := fs.String("body-file", "", "send this body instead of a generated event")
	subID := fs.String("subscription", "sub_dev_1", "subscription id of the generated event")
	status := fs.String("status", "active", "subscription status of the generated event")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var body []byte
	if *bodyFile != "" {
		if body, err = os.ReadFile(*bodyFile); err != nil {
			return err
		}
	} else {
		body = DevEvent(*eventType, *subID, *status, time.Now())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, *url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", provider.SignStripe(secret, time.Now().Unix(), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	fmt.Fprintf(stdout, "%s %s\n", resp.Status, bytes.TrimSpace(out))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("receiver answered %s", resp.Status)
	}
	return nil
}

// DevEvent builds a Stripe subscription event with a fresh id.
func DevEvent(eventType, subID, status string, at time.Time) []byte {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return []byte(fmt.Sprintf(`{"id":"evt_dev_%s","object":"event","type":%q,"created":%d,"data":{"object":{"id":%q,"object":"subscription","customer":"cus_dev_1","status":%q,"items":{"data":[{"price":{"id":"price_dev_basic"}}]}}}}`,
		hex.EncodeToString(b[:]), eventType, at.Unix(), subID, status))
}

func localAddr(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
}

func sourceNames(cfg *config.Config) string {
	names := make([]string, len(cfg.Sources))
	for i, s := range cfg.Sources {
		names[i] = s.Name
	}
	return strings.Join(names, ",")
}
