package provider

import (
	"encoding/hex"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// GitHub verifies X-Hub-Signature-256: "sha256=" and the hex HMAC-SHA256 of
// the body. GitHub signs no timestamp, so a captured delivery stays valid:
// the ledger's dedup on X-GitHub-Delivery (the same GUID on redelivery) is
// what stops a replayed one from being applied twice.
var GitHub = &Provider{
	Name:             "github",
	IDLocation:       "X-GitHub-Delivery header",
	SignatureHeaders: []string{"X-Hub-Signature-256", "X-Hub-Signature"},
	Headers: []string{"X-GitHub-Event", "X-GitHub-Delivery", "X-GitHub-Hook-ID",
		"X-GitHub-Hook-Installation-Target-ID", "X-GitHub-Hook-Installation-Target-Type", "User-Agent"},
	VerifyFunc: verifyGitHub,
	ParseFunc:  parseGitHub,
	// "Payloads are capped at 25 MB" (GitHub's webhook documentation); a
	// failed delivery is not retried by GitHub.
	MaxBodyBytes: 25 << 20,
	// A redelivery keeps its GUID, its event name and its body; the same
	// body under another GUID is a replay with a forged id, whatever event
	// name it comes under (the name is unsigned). Only the names GitHub
	// sends with one body (a GitHub App's installation and
	// integration_installation) are told apart: githubSharedBodies.
	DigestFunc: func(h http.Header, body []byte) string {
		return familyDigest(githubSharedBodies, h.Get("X-GitHub-Event"), body)
	},
	SignFunc: func(secret string, d Delivery) (http.Header, error) {
		event, _, _ := strings.Cut(d.Type, ".")
		return http.Header{
			"X-Hub-Signature-256": {SignGitHub(secret, d.Body)},
			"X-Github-Delivery":   {d.ID},
			"X-Github-Event":      {event},
		}, nil
	},
}

func verifyGitHub(h http.Header, body []byte, secrets [][]byte, _ time.Time, _ time.Duration) (Verification, error) {
	header := h.Get("X-Hub-Signature-256")
	if header == "" {
		return Verification{}, signatureError(ReasonMissing, "missing X-Hub-Signature-256 header")
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return Verification{}, signatureError(ReasonMalformed, "X-Hub-Signature-256 lacks the sha256= prefix")
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil {
		return Verification{}, signatureError(ReasonMalformed, "X-Hub-Signature-256 is not hex")
	}
	i, ok := matchSecret(secrets, [][]byte{sig}, func(secret []byte) []byte { return hmacSHA256(secret, body) })
	if !ok {
		return Verification{}, signatureError(ReasonMismatch, "X-Hub-Signature-256 does not match the body")
	}
	return Verification{SecretIndex: i}, nil
}

// SignGitHub returns an X-Hub-Signature-256 value for body.
func SignGitHub(secret string, body []byte) string {
	return "sha256=" + hex.EncodeToString(hmacSHA256([]byte(secret), body))
}

// githubEvent is the shape of GitHub's event names (push, pull_request,
// integration_installation), lower-cased: the name is unsigned, so one
// event cannot be spelled many ways.
var githubEvent = regexp.MustCompile(`^[a-z0-9_]+$`)

func parseGitHub(h http.Header, body []byte) (Parsed, error) {
	var payload struct{ Action string }
	if err := decodeMembers(body, member{Name: "action", Dst: &payload.Action}); err != nil {
		return Parsed{}, payloadError("not a JSON GitHub payload (set the webhook's content type to application/json): %v", err)
	}
	ev := Parsed{ID: h.Get("X-GitHub-Delivery"), Type: strings.ToLower(h.Get("X-GitHub-Event"))}
	if ev.Type != "" && !githubEvent.MatchString(ev.Type) {
		return Parsed{}, payloadError("X-GitHub-Event %q is not an event name (letters, digits and _)", h.Get("X-GitHub-Event"))
	}
	if ev.Type != "" && payload.Action != "" {
		ev.Type += "." + payload.Action
	}
	return ev, nil
}
