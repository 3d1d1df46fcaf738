package provider

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"
)

// Published address lists: where Stripe and GitHub publish the addresses
// they send webhooks from, by the name a source's allow_ips uses.
var PublishedSources = map[string]string{
	"stripe": "https://stripe.com/files/ips/ips_webhooks.json",
	"github": "https://api.github.com/meta",
}

// PublishedIPs is a set of published sender lists, as `hookledger ips
// update` writes them.
type PublishedIPs struct {
	About string                   `json:"about,omitempty"`
	Lists map[string]PublishedList `json:"lists"`
	// Origin says where this copy was read from: a file, or "shipped".
	Origin string `json:"-"`
}

// PublishedList is one provider's list.
type PublishedList struct {
	Source    string    `json:"source"`
	FetchedAt time.Time `json:"fetched_at"`
	Prefixes  []string  `json:"prefixes"`
}

//go:embed published_ips.json
var shippedIPs []byte

// LoadPublishedIPs reads the lists at path, or the shipped copy when path
// is empty.
func LoadPublishedIPs(path string) (*PublishedIPs, error) {
	raw, origin := shippedIPs, "shipped"
	if path != "" {
		var err error
		if raw, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("published address lists: %w", err)
		}
		origin = path
	}
	var p PublishedIPs
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("published address lists %s: %w", origin, err)
	}
	for name, l := range p.Lists {
		if _, err := parsePrefixes(l.Prefixes); err != nil {
			return nil, fmt.Errorf("published address lists %s: %s: %w", origin, name, err)
		}
	}
	p.Origin = origin
	return &p, nil
}

// ParsePublished reads a provider's own answer: Stripe's ips_webhooks.json
// ({"WEBHOOKS": [addresses]}) or GitHub's /meta (its "hooks" CIDRs).
func ParsePublished(name string, body []byte) ([]string, error) {
	var doc struct {
		Webhooks []string `json:"WEBHOOKS"`
		Hooks    []string `json:"hooks"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("%s list: %w", name, err)
	}
	list := doc.Hooks
	if name == "stripe" {
		list = doc.Webhooks
	}
	prefixes, err := parsePrefixes(list)
	if err != nil {
		return nil, fmt.Errorf("%s list: %w", name, err)
	}
	if len(prefixes) == 0 {
		return nil, fmt.Errorf("%s list: no addresses in the answer", name)
	}
	out := make([]string, len(prefixes))
	for i, p := range prefixes {
		out[i] = p.String()
	}
	return out, nil
}

// parsePrefixes reads CIDRs and bare addresses (a /32 or /128).
func parsePrefixes(entries []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(entries))
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(e)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR nor an address", e)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// AllowList is the client networks a source accepts deliveries from.
type AllowList struct {
	prefixes []netip.Prefix
	// Published names the published lists it includes.
	Published []string
}

// NewAllowList builds a source's list from its allow_ips entries: CIDRs,
// addresses, or "stripe" / "github" for that provider's published list.
func NewAllowList(entries []string, published *PublishedIPs) (*AllowList, error) {
	l := &AllowList{}
	var own []string
	for _, e := range entries {
		if _, ok := PublishedSources[e]; !ok {
			own = append(own, e)
			continue
		}
		pl, ok := published.Lists[e]
		if !ok || len(pl.Prefixes) == 0 {
			return nil, fmt.Errorf("allow_ips %q: the %s copy of the published lists has no %s list; run hookledger ips update", e, published.Origin, e)
		}
		ps, err := parsePrefixes(pl.Prefixes)
		if err != nil {
			return nil, err
		}
		l.prefixes = append(l.prefixes, ps...)
		if !slices.Contains(l.Published, e) {
			l.Published = append(l.Published, e)
		}
	}
	ps, err := parsePrefixes(own)
	if err != nil {
		return nil, fmt.Errorf("allow_ips: %w", err)
	}
	l.prefixes = append(l.prefixes, ps...)
	return l, nil
}

// Allows reports whether the client address is in the list; an
// unreadable address is not.
func (l *AllowList) Allows(addr string) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range l.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
