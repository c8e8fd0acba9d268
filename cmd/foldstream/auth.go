package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
)

// tokenEnv is the environment variable the client sub-commands read their bearer token from when
// neither --token nor --token-file is given.
const tokenEnv = "FOLDSTREAM_TOKEN"

// clientFlags are the flags of every sub-command that talks to a server: its address and the
// bearer token to present (docs/server.md#authorization). A new client sub-command registers them
// with register and sends header() with every request.
type clientFlags struct {
	server    string
	token     string
	tokenFile string
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", defaultServer, "server base URL")
	fs.StringVar(&f.token, "token", "", "bearer token to send (shows in ps: prefer --token-file or $"+tokenEnv+")")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token to send (also read from $"+tokenEnv+")")
}

// bearer returns the token to present: --token, else the first line of --token-file, else
// $FOLDSTREAM_TOKEN, else "" (anonymous). The token is remembered so that no message printed by
// this process shows it (see redact).
func (f *clientFlags) bearer() (string, error) {
	if f.token != "" && f.tokenFile != "" {
		return "", errors.New("give --token or --token-file, not both")
	}
	tok := f.token
	switch {
	case f.tokenFile != "":
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return "", fmt.Errorf("reading --token-file: %w", err)
		}
		tok, _, _ = strings.Cut(string(b), "\n")
		if tok = strings.TrimSpace(tok); tok == "" {
			return "", fmt.Errorf("--token-file %s holds no token on its first line", f.tokenFile)
		}
	case tok == "":
		tok = strings.TrimSpace(os.Getenv(tokenEnv))
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", errors.New("the bearer token contains white space; a token is one word")
	}
	addSecret(tok)
	return tok, nil
}

// header returns the headers every request carries: Authorization when there is a token.
func (f *clientFlags) header() (http.Header, error) {
	tok, err := f.bearer()
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	return h, nil
}

// secrets are the tokens this process presents; redact removes them from every message it prints.
var secrets struct {
	mu   sync.Mutex
	list []string
}

func addSecret(s string) {
	if s == "" {
		return
	}
	secrets.mu.Lock()
	defer secrets.mu.Unlock()
	secrets.list = append(secrets.list, s)
}

// redact replaces every token this process presents with REDACTED. It is the last guard: the
// client already leaves credentials out of the URLs it prints.
func redact(msg string) string {
	secrets.mu.Lock()
	defer secrets.mu.Unlock()
	for _, s := range secrets.list {
		msg = strings.ReplaceAll(msg, s, "REDACTED")
	}
	return msg
}
