package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"time"
)

// GitHubOptions selects the deliveries of one repository webhook.
type GitHubOptions struct {
	APIBase string
	Token   string
	Repo    string // owner/name
	HookID  string
	Since   time.Time
	DryRun  bool
	HTTP    *http.Client
	// Seen reports whether the ledger already has a delivery GUID; nil
	// treats every failed GUID as missing (redelivering one is harmless).
	Seen func(ctx context.Context, guid string) (bool, error)
	// Report is told about each GUID to redeliver (or that would be, with
	// DryRun).
	Report func(d Delivery)
}

// Delivery is one GitHub webhook delivery attempt.
type Delivery struct {
	ID          int64     `json:"id"`
	GUID        string    `json:"guid"`
	DeliveredAt time.Time `json:"delivered_at"`
	StatusCode  int       `json:"status_code"`
	Event       string    `json:"event"`
	Action      *string   `json:"action"`
}

// GitHub lists the hook's deliveries since o.Since (cursor pagination
// through the Link header), finds GUIDs none of whose attempts succeeded
// and that the ledger lacks, and asks GitHub to redeliver each once. GitHub
// keeps the X-GitHub-Delivery GUID on redelivery, so the ledger dedups them
// like any other delivery.
func GitHub(ctx context.Context, o GitHubOptions, progress func(Stats)) (Stats, error) {
	r := &run{progress: progress}
	return r.result(github(ctx, o, r))
}

func github(ctx context.Context, o GitHubOptions, r *run) error {
	c := newClient(o.HTTP, func(req *http.Request) {
		req.Header.Set("Authorization", "Bearer "+o.Token)
		req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	})
	hook := fmt.Sprintf("%s/repos/%s/hooks/%s/deliveries", o.APIBase, o.Repo, url.PathEscape(o.HookID))
	next := hook + "?per_page=100"
	var order []string
	newest := map[string]Delivery{}
	succeeded := map[string]bool{}
	for next != "" {
		body, header, err := c.do(ctx, http.MethodGet, next)
		if err != nil {
			return fmt.Errorf("list deliveries: %w", err)
		}
		var page []Delivery
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("deliveries page: %w", err)
		}
		older := false
		for _, d := range page {
			if d.DeliveredAt.Before(o.Since) {
				older = true
				continue
			}
			r.fetched(1)
			if d.StatusCode >= 200 && d.StatusCode < 300 {
				succeeded[d.GUID] = true
			}
			if _, ok := newest[d.GUID]; !ok {
				order = append(order, d.GUID)
				newest[d.GUID] = d // newest first: the first attempt seen is the latest
			}
		}
		next = ""
		if !older {
			next = linkNext(header.Get("Link"))
		}
	}
	for _, guid := range order {
		if succeeded[guid] {
			continue
		}
		if o.Seen != nil {
			seen, err := o.Seen(ctx, guid)
			if err != nil {
				return err
			}
			if seen {
				r.update(func(s *Stats) { s.Duplicate++ })
				continue
			}
		}
		d := newest[guid]
		if o.Report != nil {
			o.Report(d)
		}
		if o.DryRun {
			r.update(func(s *Stats) { s.New++ })
			continue
		}
		_, _, err := c.do(ctx, http.MethodPost, fmt.Sprintf("%s/%d/attempts", hook, d.ID))
		r.update(func(s *Stats) {
			if err != nil {
				s.Failed++
				r.errs = append(r.errs, fmt.Errorf("redeliver %s: %w", guid, err))
			} else {
				s.New++
			}
		})
	}
	return nil
}

var linkRel = regexp.MustCompile(`<([^>]+)>\s*;\s*rel="([^"]+)"`)

// linkNext returns the rel="next" URL of a Link header.
func linkNext(link string) string {
	for _, m := range linkRel.FindAllStringSubmatch(link, -1) {
		if m[2] == "next" {
			return m[1]
		}
	}
	return ""
}
