#!/usr/bin/env python3
"""Writes signatures_v1a.json: Standard Webhooks asymmetric (v1a, ed25519)
signature vectors. Signed with pyca/cryptography (OpenSSL's ed25519), an
implementation independent of Go's crypto/ed25519; the Go tests check that
crypto/ed25519 produces the same signatures from the same seeds (ed25519 is
deterministic) and that hookledger verify accepts exactly the valid ones.
Format of keys and headers: spec/standard-webhooks.md of
standard-webhooks/standard-webhooks @ b2fa7b8719fb75d326b591077f5d1b385cfcdfae
(whpk_/whsk_ base64 prefixes, "v1a," signature identifier, space-separated
beside v1 entries, signed content "<id>.<timestamp>.<body>")."""
import base64, hashlib, hmac, json, os
import cryptography
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives import serialization

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "signatures_v1a.json")
b64 = lambda b: base64.b64encode(b).decode()

def keypair(label):
    seed = hashlib.sha256(b"hookledger v1a vector key " + label.encode()).digest()
    priv = Ed25519PrivateKey.from_private_bytes(seed)
    pub = priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return priv, "whsk_" + b64(seed), "whpk_" + b64(pub)

def v1a(priv, msg_id, ts, body):
    return "v1a," + b64(priv.sign(f"{msg_id}.{ts}.".encode() + body))

def v1(secret, msg_id, ts, body):
    key = base64.b64decode(secret[len("whsec_"):])
    return "v1," + b64(hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest())

body = open(os.path.join(os.path.dirname(OUT), "standard-webhooks", "test-vector-body.txt"), "rb").read()
msg_id, ts = "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330
a, a_sk, a_pk = keypair("a")
b, b_sk, b_pk = keypair("b")
hmac_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
origin = "derived: signed with pyca/cryptography " + cryptography.__version__ + " (OpenSSL ed25519) by build_signatures_v1a.py"

def vec(desc, secret, sig, expect, now=ts, tamper=False, signing_key=None):
    v = {"provider": "standard-webhooks", "description": desc, "secret": secret,
         "headers": {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": sig},
         "body_base64": b64(body + (b" " if tamper else b"")), "body_text": (body + (b" " if tamper else b"")).decode(),
         "now_unix": now, "expect": expect, "source": "standard-webhooks spec v1a (see build_signatures_v1a.py)", "origin": origin}
    if signing_key:
        v["signing_key"] = signing_key
    return v

vectors = [
    vec("v1a: ed25519 signature, public key configured", a_pk, v1a(a, msg_id, ts, body), "valid", signing_key=a_sk),
    vec("v1 and v1a in one header, public key configured", a_pk, v1(hmac_secret, msg_id, ts, body) + " " + v1a(a, msg_id, ts, body), "valid", signing_key=a_sk),
    vec("v1a then v1 in one header, HMAC secret configured", hmac_secret, v1a(a, msg_id, ts, body) + " " + v1(hmac_secret, msg_id, ts, body), "valid"),
    vec("v1a: rotation, signed by the new key", b_pk, v1a(a, msg_id, ts, body) + " " + v1a(b, msg_id, ts, body), "valid", signing_key=b_sk),
    vec("v1a: another key's signature", b_pk, v1a(a, msg_id, ts, body), "invalid"),
    vec("v1a: body changed after signing", a_pk, v1a(a, msg_id, ts, body), "invalid", tamper=True),
    vec("v1a: timestamp older than 300 s", a_pk, v1a(a, msg_id, ts, body), "invalid", now=ts + 301),
    vec("v1a: only a v1 signature, public key configured", a_pk, v1(hmac_secret, msg_id, ts, body), "invalid"),
    vec("v1a: signature under the v1 identifier", a_pk, "v1," + v1a(a, msg_id, ts, body)[4:], "invalid"),
]
json.dump(vectors, open(OUT, "w"), indent=1)
open(OUT, "a").write("\n")
