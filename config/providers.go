package config

// providerFacts is what configuration checks a source of a provider
// against. Package provider holds these facts; providers_gen.go copies
// them from it (go generate ./config), since config imports no module.
type providerFacts struct {
	// signsBodyOnly: the signature covers the body and not the event id,
	// so the body identifies a replay (body_dedup).
	signsBodyOnly bool
	// publishedIPs: the provider publishes its senders' addresses, which
	// allow_ips may name it for.
	publishedIPs bool
	// secretPrefix starts every signing secret the provider issues.
	secretPrefix string
	// publicKeyPrefix starts the sender's public keys, when the provider
	// verifies asymmetric signatures with them.
	publicKeyPrefix string
}

// ProviderNames lists the providers a source may name, in the order of
// their variables.
func ProviderNames() []string {
	var names []string
	for _, o := range options {
		if o.Provider != "" && !o.PublicKeys {
			names = append(names, o.Provider)
		}
	}
	return names
}

// providersWhere lists the providers whose facts hold for is, in the
// order of ProviderNames.
func providersWhere(is func(providerFacts) bool) []string {
	var names []string
	for _, name := range ProviderNames() {
		if is(providers[name]) {
			names = append(names, name)
		}
	}
	return names
}
