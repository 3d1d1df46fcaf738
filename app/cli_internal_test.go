package app

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hookledger/hookledger/config"
)

// TestHelpForEveryCommand: --help works for every command and subcommand,
// exits 0 and needs no database.
func TestHelpForEveryCommand(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	walk(newRootCommand(terminal{}), nil)
	require.Greater(t, len(paths), 20)
	for _, p := range paths {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append(p, "--help"), terminal{in: strings.NewReader(""), out: &out, errOut: &errOut})
		require.Equal(t, ExitOK, code, "%v --help: %s", p, errOut.String())
		require.Contains(t, out.String(), "Usage:", "%v --help", p)
	}
}

// TestConfirmOnATerminal: a person is asked, and only yes goes ahead.
func TestConfirmOnATerminal(t *testing.T) {
	t.Parallel()
	for answer, ok := range map[string]bool{"y\n": true, "yes\n": true, "n\n": false, "\n": false, "": false} {
		var errOut bytes.Buffer
		term := terminal{in: strings.NewReader(answer), out: &bytes.Buffer{}, errOut: &errOut, interactive: true}
		err := (&bulkFlags{}).confirm(term, 5, "requeue 5 settled event(s)")
		require.Equal(t, ok, err == nil, "answer %q", answer)
		require.Contains(t, errOut.String(), "This will requeue 5 settled event(s). Continue? [y/N]")
	}
	term := terminal{in: strings.NewReader(""), errOut: &bytes.Buffer{}}
	require.NoError(t, (&bulkFlags{}).confirm(term, 1, "one"), "one item needs no confirmation")
	require.NoError(t, (&bulkFlags{yes: true}).confirm(term, 9, "nine"))
	require.ErrorIs(t, (&bulkFlags{}).confirm(term, 9, "nine"), errUsage)
}

// TestStartupLogsSources: the enabled sources are logged, and no source at
// all is a warning that every webhook gets 404.
func TestStartupLogsSources(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	a := &App{role: config.RoleAll, log: zap.New(core), cfg: &config.Config{Sources: []config.Source{
		{Name: "stripe", Provider: "stripe", Namespace: "stripe", Secrets: []config.Secret{"whsec_a"}},
	}}}
	a.logSources()
	require.Equal(t, 1, logs.FilterMessage("source enabled").FilterField(zap.String("source", "stripe")).Len())

	a.cfg.Sources = nil
	a.logSources()
	warn := logs.FilterLevelExact(zapcore.WarnLevel).All()
	require.Len(t, warn, 1)
	require.Contains(t, warn[0].Message, "404")

	a.role = config.RoleWorker
	a.logSources()
	require.Len(t, logs.FilterLevelExact(zapcore.WarnLevel).All(), 1, "a worker takes no webhooks")
}

// TestFeedLines: on a console the feed's lines are bare, without the
// request's fields; in JSON they are debug lines.
func TestFeedLines(t *testing.T) {
	t.Parallel()
	main, mainLogs := observer.New(zapcore.InfoLevel)
	feed, feedLogs := observer.New(zapcore.InfoLevel)
	log := zap.New(feedRouter{main: main, feed: feed}).Named("http").With(zap.String("request_id", "r1"))
	log.Named(FeedLogger).Info("--> invoice.paid evt_1 claimed", zap.Bool("replayed", false))
	log.Info("other")
	require.Equal(t, 1, feedLogs.Len())
	require.Equal(t, "--> invoice.paid evt_1 claimed", feedLogs.All()[0].Message)
	require.Empty(t, feedLogs.All()[0].Context, "no request fields on a feed line")
	require.Equal(t, 1, mainLogs.Len())
	require.Equal(t, "other", mainLogs.All()[0].Message)

	info, infoLogs := observer.New(zapcore.InfoLevel)
	zap.New(feedRouter{main: info}).Named("http").Named(FeedLogger).Info("--> push abc claimed")
	require.Zero(t, infoLogs.Len(), "JSON at info: no per-event lines")
	debug, debugLogs := observer.New(zapcore.DebugLevel)
	zap.New(feedRouter{main: debug}).Named("http").Named(FeedLogger).Info("--> push abc claimed")
	require.Equal(t, 1, debugLogs.FilterLevelExact(zapcore.DebugLevel).Len(), "JSON at debug: the feed is debug")
}
