#!/usr/bin/env python3
"""Writes vectors.json: signature test vectors that the providers' official
libraries ship in their own tests, in the shape of
testdata/providers/signatures.json (which holds the ones gathered before;
none is repeated here). origin "verbatim": secret, body, header and
expectation copied from the test; "derived": built from the test's own
constants where the test computes its header at run time (the signature is
recomputed here, as the library computes it) or where hookledger's answer
differs from the library's (said in notes)."""
import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys

MIRROR = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors.json")


def commit(repo):
    return subprocess.run(["git", "-C", os.path.join(MIRROR, repo.replace("/", "+"), "repo"), "rev-parse", "HEAD"],
                          check=True, capture_output=True, text=True).stdout.strip()


def url(repo, path):
    return "https://github.com/%s/blob/%s/%s" % (repo, commit(repo), path)


def mac(key, data):
    return hmac.new(key, data, hashlib.sha256).digest()


vectors = []


def add(provider, description, secret, headers, body, expect, source, origin, now=None, notes=None, tolerance=None):
    v = {"provider": provider, "description": description, "secret": secret, "headers": headers,
         "body_base64": base64.b64encode(body).decode(), "body_text": body.decode(), "now_unix": now,
         "expect": expect, "source": source, "origin": origin}
    if notes:
        v["notes"] = notes
    if tolerance is not None:
        v["tolerance_seconds"] = tolerance
    vectors.append(v)


# go-github github/messages_test.go TestValidatePayload
src = url("google/go-github", "github/messages_test.go") + " (TestValidatePayload)"
body, key = b'{"yo":true}', "0123456789abcdef"
sha256 = "sha256=b1f8020f5b4cd42042f807dd939015c4a418bc1ff7f604dd55b0a19b5d953d9b"
assert sha256 == "sha256=" + mac(key.encode(), body).hex()
add("github", "go-github: sha256 signature in X-Hub-Signature-256", key, {"X-Hub-Signature-256": sha256}, body, "valid", src, "verbatim")
add("github", "go-github: only a sha1 X-Hub-Signature (go-github accepts it)", key,
    {"X-Hub-Signature": "sha1=126f2c800419c60137ce748d7672e77b65cf16d6"}, body, "invalid", src, "verbatim",
    notes="go-github accepts the legacy sha1 header; hookledger requires X-Hub-Signature-256, which GitHub sends with every delivery and its docs say to use")
add("github", "go-github: only a sha512 X-Hub-Signature (go-github accepts it)", key,
    {"X-Hub-Signature": "sha512=8456767023c1195682e182a23b3f5d19150ecea598fde8cb85918f7281b16079471b1329f92b912c4d8bd7455cb159777db8f29608b20c7c87323ba65ae62e1f"},
    body, "invalid", src, "verbatim", notes="GitHub never sends sha512; hookledger checks X-Hub-Signature-256 only")
add("github", "go-github: missing signature", key, {}, body, "invalid", src, "verbatim")
for sig, what in [("yo", "no hash prefix"), ("sha256=yo", "not hex"), ("sha256=012345", "wrong digest")]:
    add("github", "go-github: signature with " + what + " ('%s')" % sig, key, {"X-Hub-Signature-256": sig}, body, "invalid", src,
        "derived", notes="the test sends it as X-Hub-Signature with a sha1= prefix; moved to X-Hub-Signature-256")

# slack-go security_test.go
src = url("slack-go/slack", "security_test.go")
secret = "e6b19c573432dcc6b075501d51b51bb8"
body = (b'{"token":"aF5ynEYQH0dFN9imlgcADxDB","team_id":"XXXXXXXXX","api_app_id":"YYYYYYYYY","event":{"type":"app_mention",'
        b'"user":"AAAAAAAAA","text":"<@EEEEEEEEE> hello world","client_msg_id":"477cc591-ch73-a14z-4db8-g0cd76321bec",'
        b'"ts":"1531431954.000073","channel":"TTTTTTTTT","event_ts":"1531431954.000073"},"type":"event_callback",'
        b'"event_id":"TvBP7LRED7","event_time":1531431954,"authed_users":["EEEEEEEEE"]}')
h = {"X-Slack-Signature": "v0=adada4ed31709aef585c2580ca3267678c6a8eaeb7e0c1aca3ee57b656886b2c", "X-Slack-Request-Timestamp": "1531431954"}
assert h["X-Slack-Signature"] == "v0=" + mac(secret.encode(), b"v0:1531431954:" + body).hex()
add("slack", "slack-go TestEnsure: valid signing secret and body", secret, h, body, "valid", src + " (TestEnsure)", "verbatim", now=1531431954)
add("slack", "slack-go TestEnsure: wrong signing secret", "e6b19c573432dcc6b075501d51b51boo", h, body, "invalid", src + " (TestEnsure)", "verbatim", now=1531431954)
add("slack", "slack-go TestEnsure: body with another token", secret, h, body.replace(b"aF5ynEYQH0dFN9imlgcADxDB", b"12345678abcdefghlmnopqrs"),
    "invalid", src + " (TestEnsure)", "verbatim", now=1531431954)
add("slack", "slack-go TestExpiredTimestamp: the 2018 request checked later", secret, h, body, "invalid", src + " (TestExpiredTimestamp)", "derived",
    now=1531431954 + 301, notes="the test uses the wall clock; here 301 s after the timestamp")
add("slack", "slack-go newHeader(false): empty X-Slack-Signature", secret, {"X-Slack-Signature": "", "X-Slack-Request-Timestamp": "1531431954"},
    body, "invalid", src + " (TestUnsafeSignatureVerifier)", "verbatim", now=1531431954)

# Standard Webhooks libraries (Go, C#, JavaScript) and Svix's
body = b'{"test": 2432232314}'
msg, ts = "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330"
good = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
assert good == "v1," + base64.b64encode(mac(base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), (msg + "." + ts + ".").encode() + body)).decode()
sw = "standard-webhooks/standard-webhooks"
add("standard-webhooks", "Go library TestSign vector", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    {"webhook-id": msg, "webhook-timestamp": ts, "webhook-signature": good}, body, "valid", url(sw, "libraries/go/webhook_test.go") + " (TestSign)", "verbatim", now=1614265330)
for path, sig, test in [("libraries/csharp/StandardWebhooks.Tests/WebhookTest.cs", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLawdd", "TestInvalidSignatureThrowsException"),
                        ("libraries/javascript/src/webhook.test.ts", "v1,dawfeoifkpqwoekfpqoekf", "invalid signature throws error")]:
    add("standard-webhooks", test + ": '" + sig + "'", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        {"webhook-id": msg, "webhook-timestamp": ts, "webhook-signature": sig}, body, "invalid", url(sw, path) + " (" + test + ")", "derived",
        now=1614265330, notes="the test's payload is signed at the wall clock; here at the vector timestamp 1614265330")
sv = "svix/svix-webhooks"
add("svix", "Svix Go library: svix-* headers, secret without whsec_", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    {"svix-id": msg, "svix-timestamp": ts, "svix-signature": good}, body, "valid", url(sv, "go/webhook_test.go") + " (TestWebhook, TestSign)", "derived",
    now=1614265330, notes="the test signs at the wall clock; its TestSign fixes the timestamp and expects this signature")
add("svix", "Svix Python library test_invalid_signature_raises_error (last character changed)", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    {"svix-id": msg, "svix-timestamp": ts, "svix-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA="}, body, "invalid",
    url(sv, "python/tests/test_webhooks.py") + " (test_invalid_signature_raises_error)", "derived", now=1614265330,
    notes="signed at the vector timestamp instead of the wall clock")

# Shopify shopify-api-ruby test/webhooks/registry_test.rb
src = url("Shopify/shopify-api-ruby", "test/webhooks/registry_test.rb")
sig = base64.b64encode(mac(b"API_SECRET_KEY", b"{}")).decode()
add("shopify", "shopify-api-ruby: body '{}' signed with API_SECRET_KEY", "API_SECRET_KEY",
    {"X-Shopify-Hmac-Sha256": sig, "X-Shopify-Topic": "some/topic", "X-Shopify-Webhook-Id": "b1234-eefd-4c9e-9520-049845a02082"},
    b"{}", "valid", src + " (setup; api_secret_key from test/test_helper.rb)", "derived",
    notes="the test computes the HMAC at run time; Ruby's Base64.encode64 adds a newline that an HTTP header cannot carry, left out")
add("shopify", "shopify-api-ruby: the new header names without X- (shopify-hmac-sha256)", "API_SECRET_KEY",
    {"Shopify-Hmac-Sha256": sig, "Shopify-Topic": "some/topic", "Shopify-Webhook-Id": "b1234-eefd-4c9e-9520-049845a02082"},
    b"{}", "valid", src + " (test_process_with_new_format_headers)", "derived", notes="as above")
add("shopify", "shopify-api-ruby test_process_hmac_validation_fails: hmac 'invalid'", "API_SECRET_KEY",
    {"X-Shopify-Hmac-Sha256": "invalid", "X-Shopify-Topic": "some/topic"}, b"{}", "invalid", src + " (test_process_hmac_validation_fails)", "verbatim")

with open(OUT, "w") as f:
    json.dump({"about": __doc__.strip(), "vectors": vectors}, f, indent=1, ensure_ascii=False)
    f.write("\n")
print(len(vectors), "vectors")
