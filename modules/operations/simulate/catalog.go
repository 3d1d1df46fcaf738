package simulate

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/hookledger/hookledger/modules/core/provider"
)

// Sample is one event type trigger and simulate send: a realistic body a
// feature module keeps for a type it handles, sent with fresh ids.
type Sample struct {
	Type     string `json:"type"`
	Provider string `json:"provider"`
	// Module is the feature module whose samples hold it.
	Module string `json:"module"`
	// File is the body's path in the module's folder.
	File string `json:"file"`
	body []byte
}

// Catalog holds the registered modules' samples, one per provider and
// type.
type Catalog struct {
	samples []Sample
}

// NewCatalog reads each module's samples: files PROVIDER/TYPE.json in the
// fs.FS the module gives (its samples/ folder), keyed by module name. Two
// modules may keep a sample of one type; the catalog sends the first
// module's, by name.
func NewCatalog(modules map[string]fs.FS) (*Catalog, error) {
	names := make([]string, 0, len(modules))
	for name := range modules {
		names = append(names, name)
	}
	sort.Strings(names)
	c := &Catalog{}
	seen := map[string]bool{}
	for _, module := range names {
		files, err := fs.Glob(modules[module], "*/*.json")
		if err != nil {
			return nil, fmt.Errorf("samples of %s: %w", module, err)
		}
		for _, file := range files {
			providerName, typ := path.Dir(file), strings.TrimSuffix(path.Base(file), ".json")
			if _, ok := provider.Lookup(providerName); !ok {
				return nil, fmt.Errorf("samples of %s: %s: no provider %q", module, file, providerName)
			}
			body, err := fs.ReadFile(modules[module], file)
			if err != nil {
				return nil, fmt.Errorf("samples of %s: %w", module, err)
			}
			if !json.Valid(body) {
				return nil, fmt.Errorf("samples of %s: %s is not JSON", module, file)
			}
			if seen[providerName+" "+typ] {
				continue
			}
			seen[providerName+" "+typ] = true
			c.samples = append(c.samples, Sample{
				Type: typ, Provider: providerName, Module: module, File: "modules/features/" + module + "/samples/" + file, body: body,
			})
		}
	}
	sort.SliceStable(c.samples, func(i, j int) bool {
		a, b := c.samples[i], c.samples[j]
		return a.Provider < b.Provider || a.Provider == b.Provider && a.Type < b.Type
	})
	return c, nil
}

// Samples lists every sample, by provider and type.
func (c *Catalog) Samples() []Sample { return append([]Sample(nil), c.samples...) }

// Lookup finds the sample of an event type.
func (c *Catalog) Lookup(eventType string) (Sample, bool) {
	for _, s := range c.samples {
		if s.Type == eventType {
			return s, true
		}
	}
	return Sample{}, false
}

// TypesOf lists the sampled event types of a provider.
func (c *Catalog) TypesOf(providerName string) []string {
	var out []string
	for _, s := range c.samples {
		if s.Provider == providerName {
			out = append(out, s.Type)
		}
	}
	return out
}

// Build returns a delivery of the sample's type with fresh ids, dated
// now: the event id (GitHub's delivery id, a Standard Webhooks message
// id) and the object's id are new, its prefix kept (sub_, in_...);
// objectID, when set, keeps one object across several events (a
// subscription created, then updated), or names the customer of an
// object without an id of its own.
func (s Sample) Build(objectID string, now time.Time) (provider.Delivery, error) {
	var body map[string]any
	if err := json.Unmarshal(s.body, &body); err != nil {
		return provider.Delivery{}, fmt.Errorf("sample of %s: %w", s.Type, err)
	}
	suffix := freshSuffix()
	id := "evt_" + suffix
	switch s.Provider {
	case "stripe":
		body["id"], body["created"], body["type"] = id, now.Unix(), s.Type
		refresh(object(body), objectID, suffix)
	case "paddle":
		body["event_id"], body["occurred_at"], body["event_type"] = id, now.UTC().Format(time.RFC3339Nano), s.Type
		refresh(object(body), objectID, suffix)
	case "github":
		id = fmt.Sprintf("%s-%s-4%s-8%s-%s", suffix[:8], suffix[8:12], suffix[12:15], suffix[15:18], suffix[18:30])
		if _, ok := body["after"]; ok {
			body["before"], body["after"] = body["after"], fmt.Sprintf("%040s", suffix)
		}
		if repo, ok := body["repository"].(map[string]any); ok {
			repo["pushed_at"] = now.Unix()
		}
	case "standard":
		id = "msg_" + suffix
		body["type"], body["timestamp"] = s.Type, now.UTC().Format(time.RFC3339Nano)
		if data, ok := body["data"].(map[string]any); ok && objectID != "" {
			data["customer_id"] = objectID
		}
	}
	out, err := json.Marshal(body)
	if err != nil {
		return provider.Delivery{}, err
	}
	return provider.Delivery{ID: id, Type: s.Type, At: now, Body: out}, nil
}

// refreshed are the members of an object that name other objects made
// with it (a payment intent's charge, a charge's intent): each gets the
// fresh suffix too, so that one trigger never refunds another's payment.
var refreshed = []string{"latest_charge", "payment_intent"}

// refresh gives an object a fresh id (objectID when set) with its prefix
// kept, or, for an object without an id (an entitlement summary), a
// fresh customer.
func refresh(o map[string]any, objectID, suffix string) {
	key := "id"
	if _, ok := o["id"]; !ok {
		key = "customer"
	}
	if _, ok := o[key]; ok {
		o[key] = freshID(o[key], objectID, suffix)
	}
	for _, k := range refreshed {
		if _, ok := o[k].(string); ok {
			o[k] = freshID(o[k], "", suffix)
		}
	}
}

// freshID is objectID when set, else old's prefix (up to its first "_")
// and the fresh suffix.
func freshID(old any, objectID, suffix string) string {
	if objectID != "" {
		return objectID
	}
	prefix, _, ok := strings.Cut(fmt.Sprint(old), "_")
	if !ok {
		prefix = "obj"
	}
	return prefix + "_" + suffix[:24]
}

func freshSuffix() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// object is a Stripe event's data.object, or a Paddle event's data.
func object(body map[string]any) map[string]any {
	data, _ := body["data"].(map[string]any)
	if data == nil {
		data = map[string]any{}
		body["data"] = data
	}
	if o, ok := data["object"].(map[string]any); ok {
		return o
	}
	return data
}
