package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// Tokens of tokenServer: one may write, one may only read.
const (
	writeToken = "cli-test-write-token-0123456789"
	readToken  = "cli-test-read-token-0123456789"
)

// tokenServer serves an in-memory store that requires a bearer token and returns its base URL.
func tokenServer(t *testing.T) string {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Logger: log}})
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := server.ParseBearerTokens("writer read-write " + writeToken + "\nreader read " + readToken + "\n")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(st, server.Config{LongPollTimeout: 200 * time.Millisecond, Logger: log, Authorize: tokens.Authorize})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		st.Close(context.Background())
	})
	return ts.URL
}

// runMain runs the CLI through its main entry and returns the exit code, stdout and stderr.
func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Every client sub-command authenticates with --token, --token-file or $FOLDSTREAM_TOKEN.
func TestCLISubCommandsAuthenticateWithTokenFlagFileOrEnvironment(t *testing.T) {
	base := tokenServer(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(writeToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runMain(t, "append", "--server", base, "--token", writeToken, "--create", "--content-type", "application/json", "carts/ivan", `{"n":1}`); code != 0 {
		t.Fatalf("append --token: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runMain(t, "append", "--server", base, "--token-file", tokenFile, "carts/ivan", `{"n":2}`); code != 0 {
		t.Fatalf("append --token-file: exit %d: %s", code, errOut)
	}
	stdin = strings.NewReader("{\"n\":3}\n")
	if code, _, errOut := runMain(t, "append", "--server", base, "--token-file", tokenFile, "--lines", "carts/ivan"); code != 0 {
		t.Fatalf("append --lines --token-file: exit %d: %s", code, errOut)
	}
	t.Setenv(tokenEnv, readToken)
	if code, out, errOut := runMain(t, "read", "--server", base, "carts/ivan"); code != 0 || out != "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n" {
		t.Fatalf("read with $%s: exit %d, out %q: %s", tokenEnv, code, out, errOut)
	}
	if code, out, errOut := runMain(t, "ls", "--server", base, "-l"); code != 0 || !strings.Contains(out, "/carts/ivan") {
		t.Fatalf("ls with $%s: exit %d, out %q: %s", tokenEnv, code, out, errOut)
	}
	if code, out, errOut := runMain(t, "ls", "--server", base, "--token", readToken, "carts/"); code != 0 || out != "/carts/ivan\n" {
		t.Fatalf("ls --token: exit %d, out %q: %s", code, out, errOut)
	}
	// tail ends when the stream closes: close it once tail has asked for the tail offset.
	if code, _, errOut := runMain(t, "append", "--server", base, "--token", writeToken, "--close", "carts/ivan", `{"n":4}`); code != 0 {
		t.Fatalf("append --close: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runMain(t, "tail", "--server", base, "carts/ivan"); code != 0 {
		t.Fatalf("tail of a closed stream with $%s: exit %d: %s", tokenEnv, code, errOut)
	}
	if code, _, errOut := runMain(t, "read", "--server", base, "--token", writeToken, "--token-file", tokenFile, "carts/ivan"); code != 1 || !strings.Contains(errOut, "not both") {
		t.Errorf("--token with --token-file: exit %d, stderr %q; want a refusal", code, errOut)
	}
}

// Without a token, or with one that may not write, each sub-command fails with UNAUTHORIZED or
// FORBIDDEN, names the readable URL and never prints the token, even one given in the URL.
func TestCLIAuthFailuresAreCodedReadableAndNeverShowTheToken(t *testing.T) {
	base := tokenServer(t)
	if code, _, errOut := runMain(t, "append", "--server", base, "--token", writeToken, "--create", "--content-type", "text/plain", "carts/ivan", "x"); code != 0 {
		t.Fatalf("append: exit %d: %s", code, errOut)
	}
	t.Setenv(tokenEnv, "")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"ls without a token", []string{"ls", "--server", base}, "UNAUTHORIZED (401)"},
		{"read without a token", []string{"read", "--server", base, "carts/ivan"}, "UNAUTHORIZED (401)"},
		{"tail without a token", []string{"tail", "--server", base, "carts/ivan"}, "UNAUTHORIZED (401)"},
		{"append with a read token", []string{"append", "--server", base, "--token", readToken, "--content-type", "text/plain", "carts/ivan", "y"}, "FORBIDDEN (403)"},
		{"append --lines with a read token", []string{"append", "--server", base, "--token", readToken, "--content-type", "text/plain", "--lines", "carts/ivan"}, "FORBIDDEN (403)"},
		{"read with a wrong token", []string{"read", "--server", base, "--token", "wrong-" + writeToken, "carts/ivan"}, "UNAUTHORIZED (401)"},
		{"read with the token in the URL", []string{"read", "--retries", "0", strings.Replace(base, "http://", "http://ivan:"+writeToken+"@", 1) + "/v1/stream/carts%2Fivan?token=" + writeToken}, "UNAUTHORIZED (401)"},
	}
	for _, c := range cases {
		stdin = strings.NewReader("line\n")
		code, _, errOut := runMain(t, c.args...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want %s", c.name, code, errOut, c.want)
		}
		if strings.Contains(errOut, writeToken) || strings.Contains(errOut, readToken) {
			t.Errorf("%s: stderr shows a token: %q", c.name, errOut)
		}
		if c.name != "ls without a token" && !strings.Contains(errOut, "/v1/stream/carts/ivan") {
			t.Errorf("%s: stderr %q; want the readable URL /v1/stream/carts/ivan", c.name, errOut)
		}
	}
}
