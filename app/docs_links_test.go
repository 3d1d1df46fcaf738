package app

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// inlineLink matches a markdown link or image, [text](target) or
// ![alt](target "title"); the target is group 1.
var inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)

// refLink matches a reference definition, [name]: target.
var refLink = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)

// markdownProse returns md without fenced code blocks and inline code
// spans, whose brackets are not links.
func markdownProse(md string) string {
	var b strings.Builder
	fence := ""
	for _, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			fence = trimmed[:3]
			b.WriteString("\n")
			continue
		}
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			b.WriteString("\n")
			continue
		}
		b.WriteString(stripCodeSpans(line))
		b.WriteString("\n")
	}
	return b.String()
}

// stripCodeSpans removes `code` spans from one line.
func stripCodeSpans(line string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(line, '`')
		if i < 0 {
			b.WriteString(line)
			return b.String()
		}
		n := i
		for n < len(line) && line[n] == '`' {
			n++
		}
		ticks := line[i:n]
		end := strings.Index(line[n:], ticks)
		if end < 0 {
			b.WriteString(line)
			return b.String()
		}
		b.WriteString(line[:i])
		line = line[n+end+len(ticks):]
	}
}

// headingAnchors returns the anchors GitHub gives the headings of md:
// the heading's text, lower-cased, without punctuation but '-' and '_',
// spaces as '-', and a repeated slug suffixed -1, -2, ...
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			fence = trimmed[:3]
			continue
		}
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		level := len(trimmed) - len(strings.TrimLeft(trimmed, "#"))
		if level == 0 || level > 6 || len(trimmed) > level && trimmed[level] != ' ' || len(line)-len(trimmed) > 3 {
			continue
		}
		slug := githubSlug(strings.TrimRight(strings.TrimSpace(trimmed[level:]), "#"))
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// headingLink matches a link in a heading, which shows its text.
var headingLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// githubSlug is the anchor of a heading's text as GitHub renders it.
func githubSlug(text string) string {
	text = headingLink.ReplaceAllString(strings.TrimSpace(text), "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLinkAnchorSlugs: headings get the anchors GitHub gives them.
func TestLinkAnchorSlugs(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		"Failures and retries":                                   "failures-and-retries",
		"hookledger-dev (development and benchmarks)":            "hookledger-dev-development-and-benchmarks",
		"`/metrics` and `/readyz` behind a public load balancer": "metrics-and-readyz-behind-a-public-load-balancer",
		"The order of checks on `POST /webhooks/<source>`":       "the-order-of-checks-on-post-webhookssource",
		"Sizing, from measured figures":                          "sizing-from-measured-figures",
		"1. Ledger first":                                        "1-ledger-first",
		"Several sources per provider: the config file":          "several-sources-per-provider-the-config-file",
		"A [linked](x.md) heading_with_underscore":               "a-linked-heading_with_underscore",
		"Pruning, and dedup that outlives the payload":           "pruning-and-dedup-that-outlives-the-payload",
		"Duplicate storms: the Redis short-circuit":              "duplicate-storms-the-redis-short-circuit",
		"Stripe thin events → snapshot rows":                     "stripe-thin-events--snapshot-rows",
	} {
		require.Equal(t, want, githubSlug(text), text)
	}
	anchors := headingAnchors("# A\n\n## Notes\n\n```\n## Not a heading\n```\n\n## Notes\n#NoSpace\n")
	require.Equal(t, map[string]bool{"a": true, "notes": true, "notes-1": true}, anchors)
}

// TestDocsLinksResolve: every relative link in README.md and docs/*.md
// names a file that exists, and an #anchor names a heading of its page.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	pages = append([]string{"../README.md"}, pages...)
	require.Greater(t, len(pages), 3, "the docs were found")

	anchorsOf := map[string]map[string]bool{}
	anchors := func(path string) (map[string]bool, bool) {
		if a, ok := anchorsOf[path]; ok {
			return a, true
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, false
		}
		anchorsOf[path] = headingAnchors(string(raw))
		return anchorsOf[path], true
	}

	checked := 0
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		require.NoError(t, err)
		prose := markdownProse(string(raw))
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(prose, -1) {
			targets = append(targets, m[1])
		}
		for _, m := range refLink.FindAllStringSubmatch(prose, -1) {
			targets = append(targets, m[1])
		}
		name := strings.TrimPrefix(filepath.ToSlash(page), "../")
		for _, target := range targets {
			if target == "" {
				t.Errorf("%s: a link without a target", name)
				continue
			}
			if u, err := url.Parse(target); err == nil && u.Scheme != "" || strings.HasPrefix(target, "//") {
				continue // http(s), mailto and other absolute links
			}
			checked++
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				unescaped, err := url.PathUnescape(file)
				if err != nil {
					t.Errorf("%s: link %q: %v", name, target, err)
					continue
				}
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(unescaped))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q: no file %s", name, target, strings.TrimPrefix(filepath.ToSlash(path), "../"))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(path, ".md") {
				t.Errorf("%s: link %q: an anchor into a file that is not markdown", name, target)
				continue
			}
			a, ok := anchors(path)
			if !ok || !a[anchor] {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s", name, target, strings.TrimPrefix(filepath.ToSlash(path), "../"), anchor)
			}
		}
	}
	require.Greater(t, checked, 20, "the links were found")
}
