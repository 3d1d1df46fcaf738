package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/config"
	"github.com/hookledger/hookledger/modules/provider"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ", ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// cmdVerify checks one delivery's signature offline: exit 0 valid, 1
// invalid (reason on stderr), 2 usage error. It judges the signature and
// the provider's signature headers only, not the body's JSON.
func cmdVerify(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("verify", stderr)
	name := fs.String("provider", "", "stripe, github, shopify, paddle, slack or standard")
	var secrets, headers listFlag
	fs.Var(&secrets, "secret", "signing secret (repeat for several: any one matches)")
	fs.Var(&headers, "header", "a delivery header, 'Name: value' (repeatable)")
	bodyFile := fs.String("body-file", "", "file holding the exact body bytes")
	at := fs.String("at", "", "Unix time to check the timestamp against (default now)")
	tolerance := fs.String("tolerance", "", "timestamp tolerance: Go duration or seconds; 0 turns the check off (default: the provider's)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p, ok := provider.Lookup(*name)
	switch {
	case *name == "":
		return fmt.Errorf("%w: --provider is required (%s)", errUsage, strings.Join(provider.Names(), ", "))
	case !ok:
		return fmt.Errorf("%w: unknown provider %q (%s)", errUsage, *name, strings.Join(provider.Names(), ", "))
	case len(secrets) == 0:
		return fmt.Errorf("%w: --secret is required", errUsage)
	case *bodyFile == "":
		return fmt.Errorf("%w: --body-file is required", errUsage)
	}
	h := http.Header{}
	for _, hv := range headers {
		k, v, ok := strings.Cut(hv, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%w: --header %q: want 'Name: value'", errUsage, hv)
		}
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	now := time.Now()
	if *at != "" {
		sec, err := strconv.ParseInt(*at, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: --at %q: want Unix seconds", errUsage, *at)
		}
		now = time.Unix(sec, 0)
	}
	tol := time.Duration(-1)
	if *tolerance != "" {
		if tol, err = config.ParseDuration(*tolerance); err != nil || tol < 0 {
			return fmt.Errorf("%w: --tolerance %q: want a duration such as 10s, or seconds", errUsage, *tolerance)
		}
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = []byte(s)
		if p == provider.Standard {
			if _, err := provider.StandardKey(keys[i]); err != nil {
				return fmt.Errorf("%w: --secret %d is not a Standard Webhooks secret (whsec_ and base64)", errUsage, i+1)
			}
		}
	}
	v, err := p.Verify(h, body, keys, now, tol)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "valid: %s signature matches secret %d\n", p.Name, v.SecretIndex+1)
	return nil
}
