package provider

import (
	"slices"
	"strings"
)

// A body family is the part of a GitHub or Shopify body digest that is not
// the body: what tells apart two genuine events the provider sends with
// byte-identical bodies. Both providers sign only the body and send the
// event name (X-GitHub-Event, X-Shopify-Topic) in a header the signature
// does not cover, so the name alone cannot make a body another event: a
// captured delivery re-sent under made-up or unrelated names would be a
// new row each time. The family is therefore "" (the body alone) for every
// name, except for the names a provider sends with the same body as its
// usual one, and then only when the body has the shape those names carry.
// A body is stored at most once per name its provider sends with it.

// sharedBody is one kind of object and the names a provider sends it
// under. names[0] is the usual one: its family is "", as every unrelated
// name's is, so that a captured body re-sent under another name is the
// same event as the usual one. Each other name is a family of its own. A
// body is of the set's kind when its top-level admin_graphql_api_id names
// an object of type gid ("gid://shopify/Product/..."), or it holds every
// one of keys at the top level, or shapeFunc says so.
type sharedBody struct {
	names     []string
	gid       string
	keys      []string
	shapeFunc func(members map[string][]byte) bool
}

// shapeKeys are the top-level members any set's shape reads.
var shapeKeys = []string{"admin_graphql_api_id", "installation", "repositories_added", "variants", "product_type", "myshopify_domain", "plan_name"}

// sharedBodyOf returns the set whose kind body is, or nil.
func sharedBodyOf(sets []sharedBody, body []byte) *sharedBody {
	members := topMembers(body, shapeKeys)
	for i := range sets {
		if sets[i].fits(members) {
			return &sets[i]
		}
	}
	return nil
}

func (s *sharedBody) fits(members map[string][]byte) bool {
	if s.shapeFunc != nil {
		return s.shapeFunc(members)
	}
	if s.gid != "" && gidType(members["admin_graphql_api_id"]) == s.gid {
		return true
	}
	for _, k := range s.keys {
		if _, ok := members[k]; !ok {
			return false
		}
	}
	return len(s.keys) > 0
}

// familyOf returns name's family for body among sets.
func familyOf(sets []sharedBody, name string, body []byte) string {
	shared := slices.ContainsFunc(sets, func(s sharedBody) bool { return slices.Index(s.names, name) > 0 })
	if !shared {
		return "" // the usual name, or one of no set: no need to read the body
	}
	if set := sharedBodyOf(sets, body); set != nil && slices.Index(set.names, name) > 0 {
		return name
	}
	return ""
}

// familyDigest is the body digest of body under name's family: the
// body's alone for "" (as GitHub's digest was before names were part of
// it), else the family's and the body's (as they were for that name).
func familyDigest(sets []sharedBody, name string, body []byte) string {
	if family := familyOf(sets, strings.ToLower(name), body); family != "" {
		return bodyDigest([]byte(family), body)
	}
	return bodyDigest(body)
}

// topMembers returns the raw values of the named top-level members of
// body; none for a body that is not a JSON object.
func topMembers(body []byte, names []string) map[string][]byte {
	out := map[string][]byte{}
	_ = scanMembers(body, func(key, value []byte) error {
		if slices.Contains(names, string(key)) {
			out[string(key)] = value
		}
		return nil
	})
	return out
}

// gidType is the object type of a Shopify GraphQL id
// ("gid://shopify/Product/632910392" is Product), or "".
func gidType(raw []byte) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	s, err := jsonString(raw)
	if err != nil {
		return ""
	}
	rest, ok := strings.CutPrefix(s, "gid://shopify/")
	if !ok {
		return ""
	}
	typ, _, _ := strings.Cut(rest, "/")
	return typ
}

// githubSharedBodies are the event names GitHub sends with one body: a
// GitHub App receives each installation event under installation and
// under the deprecated integration_installation (and
// installation_repositories under integration_installation_repositories)
// with the same payload. Sources: GitHub's "Webhook events and payloads"
// (docs.github.com/en/webhooks/webhook-events-and-payloads), which lists
// every event and no other pair, and octokit/webhooks
// (payload-examples/api.github.com, copied to testdata/corpus/github),
// whose installation payloads carry the full installation object (with
// app_id) where any other event has at most {id, node_id}. Every other
// event's body holds its action and objects of its own, so one body is one
// event whatever X-GitHub-Event says.
var githubSharedBodies = []sharedBody{
	{names: []string{"installation", "integration_installation"}, shapeFunc: func(m map[string][]byte) bool {
		_, repos := m["repositories_added"]
		return appInstallation(m) && !repos
	}},
	{names: []string{"installation_repositories", "integration_installation_repositories"}, shapeFunc: func(m map[string][]byte) bool {
		_, repos := m["repositories_added"]
		return appInstallation(m) && repos
	}},
}

// appInstallation reports whether the body's installation is the full
// object of an installation event (with app_id).
func appInstallation(m map[string][]byte) bool {
	raw, ok := m["installation"]
	if !ok {
		return false
	}
	_, ok = topMembers(raw, []string{"app_id"})["app_id"]
	return ok
}

// shopifySharedBodies are the topics Shopify sends one object under.
// Shopify's bodies are the object alone, without topic or action, so the
// topics of one object can carry identical bytes: one payload to
// products/create and products/update when a product is created and
// published, an order created paid to orders/create and orders/paid, a
// shop's object to shop/update and, unchanged, to app/uninstalled. Each
// set lists every topic of its resource in shopifyTopics; a body of a
// set's kind under any other topic is refused (checkShopifyTopic).
var shopifySharedBodies = []sharedBody{
	{names: []string{"products/update", "products/create", "products/delete"}, gid: "Product", keys: []string{"variants", "product_type"}},
	{names: []string{"orders/updated", "orders/create", "orders/paid", "orders/cancelled", "orders/fulfilled", "orders/partially_fulfilled",
		"orders/edited", "orders/delete", "orders/link_requested", "orders/risk_assessment_changed", "orders/shopify_protect_eligibility_changed"}, gid: "Order"},
	{names: []string{"customers/update", "customers/create", "customers/enable", "customers/disable", "customers/delete",
		"customers/purchasing_summary", "customers/data_request", "customers/redact"}, gid: "Customer"},
	{names: []string{"shop/update", "app/uninstalled", "shop/redact"}, keys: []string{"myshopify_domain", "plan_name"}},
	{names: []string{"draft_orders/update", "draft_orders/create", "draft_orders/delete"}, gid: "DraftOrder"},
	{names: []string{"fulfillments/update", "fulfillments/create"}, gid: "Fulfillment"},
	{names: []string{"inventory_items/update", "inventory_items/create", "inventory_items/delete"}, gid: "InventoryItem"},
	{names: []string{"locations/update", "locations/create", "locations/activate", "locations/deactivate", "locations/delete"}, gid: "Location"},
	{names: []string{"themes/update", "themes/create", "themes/publish", "themes/delete"}, gid: "Theme"},
}

// checkShopifyTopic refuses a body of a known kind under a topic Shopify
// never sends it with (made-up, or Shopify's name for other objects):
// such a delivery is a captured body under a forged topic, and would
// otherwise be a row of its own, or apply as an event it is not.
func checkShopifyTopic(topic string, body []byte) error {
	set := sharedBodyOf(shopifySharedBodies, body)
	if set == nil || slices.Contains(set.names, topic) {
		return nil
	}
	return payloadError("X-Shopify-Topic %q: Shopify sends this body only under %s", topic, strings.Join(set.names, ", "))
}
