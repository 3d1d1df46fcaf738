package config

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Standard Webhooks key prefixes. What a configured key is (a v1 HMAC
// secret or a v1a ed25519 public key) is decided by the variable or field
// it comes from, never by how it is spelt: every entry of a public-key
// variable must be a whpk_ public key, and no entry of a secret variable
// may be one. A source's Secrets list keeps its secrets first and its
// public keys after them, so after loading the whpk_ prefix says exactly
// where each entry came from, and the verifier's use of that prefix cannot
// be reached by a value of the other kind.
const (
	standardPublicKeyPrefix  = "whpk_"
	standardSigningKeyPrefix = "whsk_"
)

// varName is how an error names a secret variable: name, or name_FILE
// when the value came from a file.
func varName(getenv func(string) string, name string) string {
	if getenv(name) == "" && getenv(name+"_FILE") != "" {
		return name + "_FILE"
	}
	return name
}

// publicKeysFrom keeps the entries of a public-key variable or field
// (named by from) that are whpk_ ed25519 public keys, and describes each
// entry that is not one. A refused entry is dropped: above all, a public
// key written without its prefix never becomes an HMAC secret, which
// anyone who knows the public key could sign v1 events with.
func publicKeysFrom(from string, keys []Secret) (kept []Secret, problems []string) {
	for i, k := range keys {
		if err := checkPublicKey(k.Reveal()); err != nil {
			problems = append(problems, fmt.Sprintf("%s %s", entry(from, i), err))
			continue
		}
		kept = append(kept, k)
	}
	return kept, problems
}

// checkPublicKey says what is wrong with a value given as a Standard
// Webhooks public key. The value itself is never part of the message.
func checkPublicKey(k string) error {
	body, ok := strings.CutPrefix(k, standardPublicKeyPrefix)
	switch {
	case strings.HasPrefix(k, standardSigningKeyPrefix):
		return errors.New("is a Standard Webhooks signing key (whsk_): a receiver needs only the sender's public key (whpk_); remove the signing key from this host")
	case strings.HasPrefix(k, "whsec_"):
		return errors.New("is a v1 secret (whsec_), not a public key: v1 secrets go in STANDARD_WEBHOOK_SECRET or a source's secrets")
	case !ok:
		hint := ""
		if raw, err := decodeBase64(k); err == nil && len(raw) == ed25519.PublicKeySize {
			hint = " (it looks like a bare public key: write it as whpk_ followed by the key)"
		}
		return fmt.Errorf("is not a Standard Webhooks public key: want whpk_ followed by the base64 of the %d-byte ed25519 public key%s; "+
			"a value without the prefix is never used, since as a v1 secret anyone who knows the public key could sign events", ed25519.PublicKeySize, hint)
	}
	raw, err := decodeBase64(body)
	switch {
	case err != nil:
		return errors.New("is a whpk_ public key that is not base64")
	case len(raw) != ed25519.PublicKeySize:
		return fmt.Errorf("is a whpk_ public key of %d bytes; an ed25519 public key is %d", len(raw), ed25519.PublicKeySize)
	}
	return nil
}

// secretsFrom keeps the entries of a secret variable or field (named by
// from) that are not public keys, and describes each that is: a public
// key is public, so as an HMAC secret it would let anyone sign events.
func secretsFrom(from string, secrets []Secret) (kept []Secret, problems []string) {
	for i, s := range secrets {
		if strings.HasPrefix(s.Reveal(), standardPublicKeyPrefix) {
			problems = append(problems, entry(from, i)+" is a Standard Webhooks public key (whpk_), not a secret: "+
				"public keys go in STANDARD_WEBHOOK_PUBLIC_KEY or a standard source's public_keys / public_keys_env, where they verify v1a signatures only")
			continue
		}
		kept = append(kept, s)
	}
	return kept, problems
}

// secretsThatArePublicKeys refuses a Standard Webhooks v1 secret whose key
// is one of the source's public keys (the public key pasted, without its
// prefix, into the secret variable too).
func secretsThatArePublicKeys(from string, secrets, publicKeys []Secret) []string {
	var pubs [][]byte
	for _, p := range publicKeys {
		if raw, err := decodeBase64(strings.TrimPrefix(p.Reveal(), standardPublicKeyPrefix)); err == nil {
			pubs = append(pubs, raw)
		}
	}
	var problems []string
	for i, s := range secrets {
		key, err := decodeBase64(strings.TrimPrefix(s.Reveal(), "whsec_"))
		if err != nil {
			continue
		}
		for _, pub := range pubs {
			if bytes.Equal(key, pub) {
				problems = append(problems, entry(from, i)+" is one of the source's public keys: anyone who knows it could sign v1 events; remove it from the secrets")
				break
			}
		}
	}
	return problems
}

// entry names entry i of a list: "NAME: entry i", or the name alone when
// it already points at one entry (public_keys[2]).
func entry(from string, i int) string {
	if strings.HasSuffix(from, "]") {
		return from
	}
	return fmt.Sprintf("%s: entry %d (counting from 0)", from, i)
}

// decodeBase64 decodes standard base64, padding optional.
func decodeBase64(s string) ([]byte, error) {
	if raw, err := base64.StdEncoding.DecodeString(s); err == nil {
		return raw, nil
	}
	return base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
}
