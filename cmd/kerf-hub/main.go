// Command kerf-hub keeps every cluster's Kerf actions in one database and
// serves them (docs/hub.md, docs/design.md section 7b): `serve` runs the
// service; `clusters` and `tokens` register clusters and readers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/hub"
	"github.com/kerf-dev/kerf/hub/store"
)

const usage = `Usage: kerf-hub COMMAND [flags]

Kerf's hub: every cluster's actions in one database, served over HTTPS.

Commands:
  serve                      run the service
  clusters add NAME          register a cluster; prints its token once
  clusters list              list the clusters and their last contact
  clusters remove NAME       revoke the cluster's tokens; keeps its actions
                             (--purge deletes them and the cluster)
  tokens add-reader NAME     make a read token; prints it once
  tokens add-cluster NAME    make another token for a cluster (rotation)
  tokens list                list the tokens (never their secrets)
  tokens revoke ID           revoke a token

Every command takes --database (default $KERF_HUB_DATABASE, else
sqlite:kerf-hub.db). Run 'kerf-hub COMMAND -h' for its flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kerf-hub:", err)
		os.Exit(1)
	}
}

func defaultDatabase() string {
	if v := os.Getenv("KERF_HUB_DATABASE"); v != "" {
		return v
	}
	return "sqlite:kerf-hub.db"
}

// databaseFlag defines --database on fs. Its default is applied after
// parsing, not given to the flag: -h and every flag error print a flag's
// default, and $KERF_HUB_DATABASE may hold a password.
func databaseFlag(fs *flag.FlagSet, into *string, usage string) (applyDefault func()) {
	fs.StringVar(into, "database", "", usage+" (default $KERF_HUB_DATABASE, else sqlite:kerf-hub.db)")
	return func() {
		if *into == "" {
			*into = defaultDatabase()
		}
	}
}

// run executes one command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return errors.New("a command is needed")
		}
		return nil
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr, log)
	case "clusters", "tokens":
		if len(args) < 2 {
			return fmt.Errorf("%s: needs a subcommand (see kerf-hub -h)", args[0])
		}
		return admin(ctx, args[0]+" "+args[1], args[2:], stdout, stderr)
	default:
		return fmt.Errorf("unknown command %q (see kerf-hub -h)", args[0])
	}
}

func serve(ctx context.Context, args []string, stderr io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("kerf-hub serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := hub.Config{}
	fs.StringVar(&cfg.Listen, "listen", ":9443", "HTTPS address to serve on")
	databaseDefault := databaseFlag(fs, &cfg.Database, "database: sqlite:PATH, or a PostgreSQL URL postgres://user@host/db")
	fs.StringVar(&cfg.CertFile, "tls-cert-file", "", "TLS certificate (PEM)")
	fs.StringVar(&cfg.KeyFile, "tls-key-file", "", "TLS private key (PEM)")
	fs.StringVar(&cfg.SelfSignedCertOut, "self-signed-cert-out", "", "without --tls-cert-file: generate a self-signed certificate and write it (not its key) to this file, for clients' --cacert")
	hosts := fs.String("self-signed-hosts", "localhost,127.0.0.1,::1", "comma-separated names and addresses the self-signed certificate is for")
	retention := fs.String("retention", "400d", "how long actions are kept (a Go duration, or a number of days such as 400d)")
	fs.DurationVar(&cfg.RetentionEvery, "retention-interval", time.Hour, "how often actions older than --retention are deleted")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", hubv1.DefaultMaxBodyBytes, "largest write body accepted; larger gets 413")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	databaseDefault()
	var err error
	if cfg.Retention, err = parseDays(*retention); err != nil {
		return fmt.Errorf("--retention: %w", err)
	}
	for h := range strings.SplitSeq(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			cfg.SelfSignedHosts = append(cfg.SelfSignedHosts, h)
		}
	}
	return hub.Serve(ctx, cfg, log)
}

// parseDays reads a Go duration or a whole number of days ("400d").
func parseDays(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%q: must be a positive number of days (400d) or a Go duration (9600h)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: must be a positive number of days (400d) or a Go duration (9600h)", s)
	}
	return d, nil
}

// parseInterleaved parses flags given before, between or after the
// positional arguments, which it returns.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// admin runs a clusters or tokens subcommand against the database.
func admin(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kerf-hub "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	database := new(string)
	databaseDefault := databaseFlag(fs, database, "database: sqlite:PATH, or a PostgreSQL URL")
	purge := new(bool)
	if cmd == "clusters remove" {
		purge = fs.Bool("purge", false, "also delete the cluster's actions, workloads and counters, and free its name (default: keep them, the audit trail outlives the cluster)")
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	databaseDefault()
	want := map[string]int{"clusters add": 1, "clusters list": 0, "clusters remove": 1, "tokens add-reader": 1, "tokens add-cluster": 1, "tokens list": 0, "tokens revoke": 1}
	n, ok := want[cmd]
	if !ok {
		return fmt.Errorf("unknown command %q (see kerf-hub -h)", cmd)
	}
	if len(pos) != n {
		return fmt.Errorf("%s: takes %d argument(s), got %d", cmd, n, len(pos))
	}
	arg := ""
	if n > 0 {
		arg = pos[0]
	}
	st, err := store.Open(ctx, *database, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer st.Close()
	switch cmd {
	case "clusters add":
		if errs := validation.IsDNS1123Label(arg); len(errs) > 0 {
			return fmt.Errorf("cluster name %q: must be lower-case letters, digits and '-', at most 63 (%s)", arg, strings.Join(errs, "; "))
		}
		tok, err := st.AddCluster(ctx, arg)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, tok)
		fmt.Fprintf(stderr, "registered cluster %q; the token above is shown only once: give it to that cluster's kerf-leader (--hub-token-file)\n", arg)
	case "clusters remove":
		rm, err := st.RemoveCluster(ctx, arg, *purge)
		if err != nil {
			return err
		}
		if rm.Purged {
			fmt.Fprintf(stderr, "removed cluster %q: revoked %d token(s); purged %d action(s), its workloads and counters; the name is free\n", arg, rm.TokensRevoked, rm.ActionsDeleted)
		} else {
			fmt.Fprintf(stderr, "removed cluster %q: revoked %d token(s), its writes are refused from now on; its actions are kept (--purge deletes them)\n", arg, rm.TokensRevoked)
		}
	case "tokens add-cluster":
		tok, err := st.AddClusterToken(ctx, arg)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, tok)
		fmt.Fprintf(stderr, "made another token for cluster %q, shown only once; revoke the old one when the leader uses this\n", arg)
	case "tokens add-reader":
		tok, err := st.AddReader(ctx, arg)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, tok)
		fmt.Fprintf(stderr, "made read token %q, shown only once: send it as Authorization: Bearer <token>\n", arg)
	case "tokens revoke":
		if err := st.RevokeToken(ctx, arg); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "revoked token %s\n", arg)
	case "clusters list":
		cs, err := st.Clusters(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tREGISTERED\tLAST CONTACT\tLEADER\tAGENTS\tUNDELIVERED\tLAG\tREMOVED")
		for _, c := range cs {
			contact, leader, agents, undelivered, lag := "never", "", "", "", ""
			if c.LastContact != nil {
				contact = c.LastContact.UTC().Format(time.RFC3339)
				leader, agents = c.Leader.Identity, strconv.Itoa(c.Leader.AgentsConnected)
				undelivered, lag = strconv.FormatInt(c.Leader.Undelivered, 10), (time.Duration(c.Leader.LagSeconds * float64(time.Second))).Round(time.Second).String()
			}
			removed := ""
			if c.RemovedAt != nil {
				removed = c.RemovedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.RegisteredAt.UTC().Format(time.RFC3339), contact, leader, agents, undelivered, lag, removed)
		}
		return tw.Flush()
	case "tokens list":
		ts, err := st.Tokens(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tNAME\tCREATED")
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.Kind, t.Name, t.CreatedAt.Format(time.RFC3339))
		}
		return tw.Flush()
	}
	return nil
}
