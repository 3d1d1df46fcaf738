#!/usr/bin/env python3
"""Builds testdata/corpus from snapshots of the providers' public repositories.

Usage: build.py MIRROR_DIR
MIRROR_DIR holds one bare git repository per source, named "<owner>+<name>/repo"
(the layout the snapshots were taken in). Every file written is listed in
MANIFEST.json with its repository, commit, path and form:

  byte-exact  the published file, unchanged
  extracted   one JSON value cut out of a larger published file (a list
              response, a source literal) and serialized as the provider
              serializes deliveries; nothing in it changed
  wrapped     a published resource or inner event put inside the provider's
              event envelope; the envelope fields we chose are under "filled"
  composed    built by us where no official example exists (usage.recorded)

Headers that a provider sends beside the body (GitHub's delivery GUID,
Shopify's event id, webhook-id) are not part of the body; the ids used are
in the manifest ("event_id") and derived deterministically from the path.
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.parse
import uuid

OUT = os.path.dirname(os.path.abspath(__file__))
MIRROR = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror"

entries = []


def repo_dir(repo):
    return os.path.join(MIRROR, repo.replace("/", "+"), "repo")


def git(repo, *args):
    return subprocess.run(["git", "-C", repo_dir(repo), *args], check=True, capture_output=True).stdout


def commit(repo):
    return git(repo, "rev-parse", "HEAD").decode().strip()


def show(repo, path):
    return git(repo, "show", "HEAD:" + path)


def ls(repo, under):
    return git(repo, "ls-tree", "-r", "--name-only", "HEAD", under).decode().split("\n")[:-1]


def short(s, n=12):
    return hashlib.sha256(s.encode()).hexdigest()[:n]


def write(provider, name, body, entry):
    rel = provider + "/" + name
    path = os.path.join(OUT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(body)
    entry = {"file": rel, "provider": provider, **entry}
    entry.setdefault("filled", [])
    entries.append(entry)


def compact(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()


def pretty(v):
    return json.dumps(v, indent=2, ensure_ascii=False).encode()


def source(repo, path, selector=None):
    s = {"repository": repo, "commit": commit(repo), "path": path}
    if selector:
        s["selector"] = selector
    return s


# --- GitHub: octokit/webhooks payload-examples, one per event and action ---
def github():
    repo = "octokit/webhooks"
    groups = {}
    # api.github.com first; GitHub Enterprise Server and github.ae only for
    # the events github.com does not send.
    for base in ["payload-examples/api.github.com/", "payload-examples/ghes-35/", "payload-examples/github.ae/"]:
        found = {}
        for path in ls(repo, base):
            if not path.endswith(".json") or path.endswith("index.json"):
                continue
            event = path[len(base):].split("/")[0]
            if base != "payload-examples/api.github.com/" and any(k[0] == event for k in groups):
                continue
            body = show(repo, path)
            action = json.loads(body).get("action")
            found.setdefault((event, action), []).append((path, body))
        for k, v in found.items():
            groups.setdefault(k, v)
    for (event, action), files in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        # The module handles push: every published push variant goes in.
        files.sort(key=lambda f: (not os.path.basename(f[0]).startswith(("payload", (action or "") + ".payload")), len(f[0]), f[0]))
        chosen = files if event == "push" else files[:1]
        for path, body in chosen:
            variant = os.path.basename(path).replace(".payload.json", "").replace(".json", "")
            typ = event + ("." + action if action else "")
            name = typ + ("" if variant in ("payload", action) else "." + variant) + ".json"
            write("github", name, body, {
                "event_id": str(uuid.uuid5(uuid.NAMESPACE_URL, "github:" + path)),
                "header_type": event,
                "event_type": typ,
                "form": "byte-exact",
                "source": source(repo, path),
                "filled": ["X-GitHub-Delivery header: a UUID derived from the path (headers are not in the published example)"],
            })


    # GitHub's default content type for a new webhook is a form: payload=<JSON>.
    path = "payload-examples/api.github.com/push/payload.json"
    body = b"payload=" + urllib.parse.quote_plus(show(repo, path)).encode()
    write("github", "push.form-urlencoded.txt", body, {
        "event_id": str(uuid.uuid5(uuid.NAMESPACE_URL, "github-form:" + path)),
        "header_type": "push",
        "event_type": "push",
        "content_type": "application/x-www-form-urlencoded",
        "form": "wrapped",
        "source": source(repo, path),
        "filled": ["the published push payload sent as GitHub sends it to a webhook whose content type is "
                   "application/x-www-form-urlencoded (GitHub's default): payload=<form-escaped JSON>",
                   "X-GitHub-Delivery header: a UUID derived from the path"],
        "refused": {"status": 400, "cause": "modules/core/provider/github.go:59-63 parseGitHub decodes the body as JSON only; "
                    "a form-encoded delivery (GitHub's default content type) is verified and then answered 400 "
                    "'not a JSON GitHub payload (set the webhook's content type to application/json)'"},
    })


# --- Stripe: stripe/openapi fixtures wrapped as events, types from stripe-node ---
def snake(name):
    special = {"InvoiceItem": "invoiceitem", "Sigma.ScheduledQueryRun": "scheduled_query_run",
               "CustomerSource": "card", "Stripe.Account": "account"}
    if name in special:
        return special[name]
    return ".".join(re.sub(r"(?<!^)(?=[A-Z])", "_", part).lower() for part in name.split("."))


def stripe():
    fixtures_repo, node_repo = "stripe/openapi", "stripe/stripe-node"
    fixtures = json.loads(show(fixtures_repo, "openapi/fixtures3.json"))["resources"]
    events_ts = show(node_repo, "src/resources/Events.ts").decode()
    types = []
    for m in re.finditer(r"type: '([a-z0-9_.]+)';\s*data: (\w+)\.Data;", events_ts):
        typ, ns = m.group(1), m.group(2)
        obj = re.search(r"export namespace " + ns + r" \{\s*export interface Data extends Event\.Data \{\s*object: ([\w.]+);", events_ts)
        if obj:
            types.append((typ, obj.group(1)))
    envelope = fixtures["event"]
    created = 1767225600  # 2026-01-01T00:00:00Z; each event one minute after the previous
    skipped = []
    for i, (typ, ts_type) in enumerate(sorted(set(types))):
        res = snake(ts_type)
        if res not in fixtures:
            skipped.append(typ + " (" + ts_type + ")")
            continue
        ev_id = "evt_1Corpus" + short(typ, 14)
        ev = {
            "id": ev_id,
            "object": "event",
            "api_version": envelope["api_version"],
            "created": created + 60 * i,
            "data": {"object": fixtures[res]},
            "livemode": envelope["livemode"],
            "pending_webhooks": 1,
            "request": envelope["request"],
            "type": typ,
        }
        write("stripe", typ + ".json", pretty(ev), {
            "event_id": ev_id,
            "event_type": typ,
            "form": "wrapped",
            "source": source(fixtures_repo, "openapi/fixtures3.json", "resources." + res),
            "type_source": source(node_repo, "src/resources/Events.ts", "the event type's data.object (" + ts_type + ")"),
            "filled": [
                "envelope as fixtures3.json resources.event (api_version, livemode, request), serialized as Stripe does (2-space indent, envelope key order of a Stripe delivery)",
                "id " + ev_id + ", type " + typ + ", created " + str(created + 60 * i) + " (one minute per type, in type order), pending_webhooks 1",
            ],
        })
    # A thin event, as stripe-node's test signs it (JSON.stringify of the literal).
    thin = {"id": "evt_notif_signed_001", "object": "v2.core.event", "type": "v2.billing.meter.error_report_triggered",
            "created": "2024-03-07T18:27:56.000Z", "context": None, "livemode": False, "related_object": None}
    write("stripe", "v2.billing.meter.error_report_triggered.thin.json", compact(thin), {
        "event_id": thin["id"],
        "event_type": thin["type"],
        "form": "extracted",
        "source": source(node_repo, "test/CloudProviderEvent.spec.ts", "RAW_V2_NOTIFICATION (JSON.stringify of the literal, the bytes the test signs)"),
        "filled": [],
    })
    return skipped


# --- Paddle: Events API items (python SDK, go SDK) and the node SDK's notification mocks ---
def paddle():
    seen = set()
    for repo, path in [("PaddleHQ/paddle-python-sdk", "tests/Functional/Resources/Events/_fixtures/response/list_default.json"),
                       ("PaddleHQ/paddle-go-sdk", "testdata/events.json")]:
        for i, ev in enumerate(json.loads(show(repo, path))["data"]):
            if ev["event_id"] in seen:
                continue
            seen.add(ev["event_id"])
            write("paddle", ev["event_type"] + "." + ev["event_id"] + ".json", compact(ev), {
                "event_id": ev["event_id"],
                "event_type": ev["event_type"],
                "form": "extracted",
                "source": source(repo, path, "data[%d]" % i),
                "filled": ["serialized compact, as Paddle sends notifications (an Events API item has no notification_id)"],
            })
    repo = "PaddleHQ/paddle-node-sdk"
    base = "src/__tests__/mocks/notifications/"
    for path in ls(repo, base):
        ts = show(repo, path).decode()
        m = re.search(r"export const \w+Mock(?:: [^=]+)? = (\{.*?\n\});\n", ts, re.S)
        if not m:
            continue
        ev = json.loads(subprocess.run(["node", "-e", "process.stdout.write(JSON.stringify(" + m.group(1) + "))"],
                                       check=True, capture_output=True).stdout)
        if ev["event_id"] in seen:
            ev["event_id"] = ev["event_id"][:-6] + short(path, 6)
            filled = ["event_id's last 6 characters replaced (the published id is shared by another example)"]
        else:
            filled = []
        seen.add(ev["event_id"])
        write("paddle", ev["event_type"] + ".json", compact(ev), {
            "event_id": ev["event_id"],
            "event_type": ev["event_type"],
            "form": "extracted",
            "source": source(repo, path, "the exported mock object (TypeScript literal evaluated, serialized compact)"),
            "filled": filled,
        })


# --- Shopify: REST Admin resource fixtures of shopify-app-js, the representation webhooks carry ---
SHOPIFY_TOPICS = {
    "order": ["orders/create", "orders/updated", "orders/paid", "orders/cancelled", "orders/fulfilled"],
    "product": ["products/create", "products/update"],
    "customer": ["customers/create", "customers/update"],
    "draft_order": ["draft_orders/create", "draft_orders/update"],
    "fulfillment": ["fulfillments/create", "fulfillments/update"],
    "refund": ["refunds/create"],
    "collection": ["collections/create", "collections/update"],
    "custom_collection": ["collections/create", "collections/update"],
    "smart_collection": ["collections/update"],
    "inventory_item": ["inventory_items/create", "inventory_items/update"],
    "inventory_level": ["inventory_levels/update", "inventory_levels/connect"],
    "location": ["locations/create", "locations/update"],
    "shop": ["shop/update"],
    "theme": ["themes/create", "themes/update", "themes/publish"],
    "transaction": ["order_transactions/create"],
    "checkout": ["checkouts/create", "checkouts/update"],
    "abandoned_checkout": ["checkouts/update"],
    "dispute": ["disputes/create", "disputes/update"],
    "tender_transaction": ["tender_transactions/create"],
    "fulfillment_event": ["fulfillment_events/create"],
    "fulfillment_order": ["fulfillment_orders/moved", "fulfillment_orders/cancelled"],
    "price_rule": [],
    "variant": [],
    "discount_code": [],
    "marketing_event": [],
    "recurring_application_charge": ["app_subscriptions/update"],
    "application_charge": ["app_purchases_one_time/update"],
}


def shopify():
    repo = "Shopify/shopify-app-js"
    base = "packages/apps/shopify-api/rest/admin/__tests__/2026-07/"
    for resource, topics in sorted(SHOPIFY_TOPICS.items()):
        if not topics:
            continue
        path = base + resource.replace("_", "_") + ".test.ts"
        try:
            ts = show(repo, path).decode()
        except subprocess.CalledProcessError:
            continue
        bodies, seen = [], set()
        for i, m in enumerate(re.finditer(r"queueMockResponse\(JSON\.stringify\((\{.*?\})\)\);\n", ts)):
            try:
                resp = json.loads(m.group(1))
            except json.JSONDecodeError:
                continue
            for key, v in resp.items():
                objs = v if isinstance(v, list) else [v]
                for o in objs:
                    if isinstance(o, dict) and "id" in o and len(o) > 3:
                        b = compact(o)
                        if b not in seen:
                            seen.add(b)
                            bodies.append((i, key, b))
        for (i, key, body), topic in zip(bodies, topics):
            ev_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "shopify:" + path + ":" + topic))
            meta = {
                "event_id": ev_id,
                "header_type": topic,
                "event_type": topic,
                "form": "extracted",
                "source": source(repo, path, "mock response %d, %s" % (i + 1, key)),
                "filled": ["the REST Admin resource (the representation a Shopify webhook carries) serialized compact",
                           "X-Shopify-Event-Id / X-Shopify-Webhook-Id: a UUID derived from the path and topic; X-Shopify-Topic " + topic],
            }
            # A mock of another resource (a collection test's products) is
            # not a body Shopify sends under this resource's topic.
            gid = re.match(r"gid://shopify/(\w+)/", json.loads(body).get("admin_graphql_api_id") or "")
            if gid and snake(gid.group(1)) not in resource and resource not in snake(gid.group(1)):
                meta["refused"] = {"status": 400, "cause": "the mock is a %s (admin_graphql_api_id %s), which Shopify never sends under %s; "
                                   "modules/core/provider/family.go checkShopifyTopic refuses a body of a known kind under a topic "
                                   "Shopify does not send it with" % (gid.group(1), json.loads(body)["admin_graphql_api_id"], topic)}
            write("shopify", topic.replace("/", ".") + "." + resource + ".json", body, meta)


# --- Slack: slack-go's Events API inner events, wrapped in its own outer event_callback ---
def slack():
    repo = "slack-go/slack"
    path = "slackevents/inner_events_test.go"
    src = show(repo, path).decode()
    by_type = {}
    for m in re.finditer(r"`([^`]*)`", src):
        try:
            inner = json.loads(m.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(inner, dict) and isinstance(inner.get("type"), str):
            by_type.setdefault(inner["type"], inner)
    outer_path = "slackevents/parsers_test.go"
    for typ, inner in sorted(by_type.items()):
        if typ == "event_callback":
            # Already a whole delivery: its own outer envelope and event_id.
            write("slack", inner["event"]["type"] + ".json", compact(inner), {
                "event_id": inner["event_id"],
                "event_type": inner["event"]["type"],
                "form": "extracted",
                "source": source(repo, path, "the event_callback literal (serialized compact, as Slack sends)"),
            })
            continue
        ev_id = "Ev" + short("slack:" + typ, 10).upper()
        outer = {"token": "XXYYZZ", "team_id": "TXXXXXXXX", "api_app_id": "AXXXXXXXXX", "event": inner,
                 "type": "event_callback", "authed_users": ["UXXXXXXX1"], "event_id": ev_id, "event_time": 1234567890}
        write("slack", typ + ".json", compact(outer), {
            "event_id": ev_id,
            "event_type": typ,
            "form": "wrapped",
            "source": source(repo, path, "the raw event of type " + typ + " (first in the file)"),
            "envelope_source": source(repo, outer_path, "TestParserOuterCallBackEvent's outer event_callback"),
            "filled": ["event_id " + ev_id + " (derived from the type)", "serialized compact, as Slack sends"],
        })
    for name, test in [("url_verification", "TestParseURLVerificationEvent"), ("app_rate_limited", "TestParseAppRateLimitedEvent")]:
        src = show(repo, outer_path).decode()
        m = re.search(r"func " + test + r"\(.*?`(.*?)`", src, re.S)
        write("slack", name + ".json", m.group(1).encode(), {
            "event_id": "",
            "event_type": name,
            "form": "byte-exact",
            "source": source(repo, outer_path, test + "'s raw literal (with its whitespace)"),
            "answer": "ignored",
        })


# --- Standard Webhooks spec examples, Svix operational webhooks, usage.recorded ---
def standard():
    repo = "standard-webhooks/standard-webhooks"
    path = "spec/standard-webhooks.md"
    md = show(repo, path).decode()
    for i, block in enumerate(re.findall(r"```json\n(.*?)```", md, re.S)):
        v = json.loads(block)
        name = v["type"] + (".thin" if len(v["data"]) == 1 else "") + ".json"
        write("standard", name, block.encode(), {
            "event_id": "msg_" + short("standard:%d" % i, 24),
            "event_type": v["type"],
            "form": "byte-exact",
            "source": source(repo, path, "JSON block %d" % (i + 1)),
            "filled": ["webhook-id header (derived from the block number)"],
        })
    repo = "svix/svix-webhooks"
    path = "codegen/lib-openapi.json"
    spec = json.loads(show(repo, path))
    for typ, op in sorted(spec["webhooks"].items()):
        body = op["post"]["requestBody"]["content"]["application/json"]["example"]
        write("standard", "svix." + typ + ".json", compact(body), {
            "event_id": "msg_" + short("svix:" + typ, 24),
            "event_type": typ,
            "headers": "svix",
            "form": "extracted",
            "source": source(repo, path, "webhooks." + typ + ".post.requestBody example"),
            "filled": ["svix-id header (derived from the type); serialized compact"],
        })
    for i, (cust, metric, qty) in enumerate([("cus_corpus_1", "api_calls", 120), ("cus_corpus_1", "api_calls", 30),
                                             ("cus_corpus_2", "storage_gb", 5)]):
        body = {"type": "usage.recorded", "timestamp": "2026-01-01T00:0%d:00Z" % i,
                "data": {"customer_id": cust, "metric": metric, "quantity": qty}}
        write("standard", "usage.recorded.%d.json" % (i + 1), compact(body), {
            "event_id": "msg_usage_corpus_%d" % (i + 1),
            "event_type": "usage.recorded",
            "form": "composed",
            "source": {"repository": "hookledger", "path": "PRODUCT contract: usage.recorded envelope"},
            "filled": ["the whole body: no published example of this product-specific type exists"],
        })


def main():
    for d in ["github", "stripe", "paddle", "shopify", "slack", "standard"]:
        subprocess.run(["rm", "-rf", os.path.join(OUT, d)], check=True)
    github()
    skipped = stripe()
    paddle()
    shopify()
    slack()
    standard()
    counts = {}
    for e in entries:
        counts[e["provider"]] = counts.get(e["provider"], 0) + 1
    manifest = {
        "about": "Official example payloads, one file per delivery body. form: byte-exact (as published), "
                 "extracted (one JSON value cut out of a larger published file and serialized as the provider "
                 "sends it), wrapped (a published resource put in the provider's event envelope), composed "
                 "(written here; no official example exists). 'filled' says what was chosen here. 'event_id' is "
                 "the id the delivery carries (body or header); 'header_type' is X-GitHub-Event or "
                 "X-Shopify-Topic; 'event_type' is what the ledger records. Rebuild with build.py.",
        "counts": counts,
        "stripe_types_without_fixture": skipped,
        "files": entries,
    }
    with open(os.path.join(OUT, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(counts, "stripe skipped:", len(skipped))


main()
