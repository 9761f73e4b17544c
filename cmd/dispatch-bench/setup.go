package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A run's throwaway database and queue, both on this machine: a benchmark
// creates and drops them (not a database that -database names), and never
// touches a server elsewhere.

// localDatabaseConfig parses dbURL and refuses servers not on this machine:
// bench creates and drops databases.
func localDatabaseConfig(dbURL string) (*pgx.ConnConfig, error) {
	// pgxpool's parser takes out its pool_* settings, which the service's
	// pool honours and a plain connection would send as server settings.
	poolCfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, errors.New("bench: DATABASE_URL does not parse")
	}
	cfg := poolCfg.ConnConfig
	hosts := []string{cfg.Host}
	for _, fb := range cfg.Fallbacks {
		hosts = append(hosts, fb.Host)
	}
	for _, h := range hosts {
		if !strings.HasPrefix(h, "/") && !isLoopbackHost(h) {
			return nil, fmt.Errorf("bench: DATABASE_URL points at %s; bench only uses a PostgreSQL server on this machine", h)
		}
	}
	return cfg, nil
}

func checkLocalSQS(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return fmt.Errorf("bench: AWS_ENDPOINT_URL_SQS %q is not a URL", endpoint)
	}
	if !isLoopbackHost(u.Hostname()) {
		return fmt.Errorf("bench: AWS_ENDPOINT_URL_SQS points at %s; bench only uses an SQS emulator on this machine", u.Hostname())
	}
	return nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// setLocalAWSEnv gives the SDK's credential chain (which reads the process
// environment) static local credentials, so it never looks further (shared
// files, instance metadata) for an emulator that ignores them anyway.
func setLocalAWSEnv() {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_REGION": "us-east-1"} {
		if os.Getenv(k) == "" {
			_ = os.Setenv(k, v)
		}
	}
}

// adminConnect connects to the server of cfg, trying its own database, then
// the maintenance databases.
func adminConnect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	var errs []error
	for _, db := range []string{cfg.Database, "postgres", "template1"} {
		c := cfg.Copy()
		c.Database = db
		conn, err := pgx.ConnectConfig(ctx, c)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("bench: connect to PostgreSQL: %w", errors.Join(errs...))
}

func createBenchDatabase(ctx context.Context, cfg *pgx.ConnConfig, name string) error {
	conn, err := adminConnect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("bench: create database %s: %w", name, err)
	}
	return nil
}

// checkBenchDatabase tells whether the database -database names exists.
func checkBenchDatabase(ctx context.Context, cfg *pgx.ConnConfig, name string) error {
	conn, err := adminConnect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("bench: look up database %s: %w", name, err)
	}
	if !exists {
		return fmt.Errorf("bench: -database %s: no such database on the server of DATABASE_URL", name)
	}
	return nil
}

// countJobs is how many jobs the database of cfg holds.
func countJobs(ctx context.Context, cfg *pgx.ConnConfig) (int64, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("bench: count jobs: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM dispatch_job`).Scan(&n); err != nil {
		return 0, fmt.Errorf("bench: count jobs: %w", err)
	}
	return n, nil
}

func dropBenchDatabase(ctx context.Context, cfg *pgx.ConnConfig, name string, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
	defer cancel()
	conn, err := adminConnect(ctx, cfg)
	if err == nil {
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: could not drop database %s: %v\n", name, err)
	}
}

// withDatabaseName returns dbURL (a URL or a keyword/value string) naming db.
func withDatabaseName(dbURL, db string) string {
	if strings.HasPrefix(dbURL, "postgres://") || strings.HasPrefix(dbURL, "postgresql://") {
		if u, err := url.Parse(dbURL); err == nil {
			u.Path = "/" + db
			return u.String()
		}
	}
	return dbURL + " dbname=" + db
}

// createBenchQueue creates a FIFO queue and returns its URL and a function
// that deletes it.
func createBenchQueue(ctx context.Context, endpoint, name string) (string, func(), error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("bench: aws config: %w", err)
	}
	api := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	out, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String(name),
		Attributes: map[string]string{
			"FifoQueue": "true", "ContentBasedDeduplication": "false", "VisibilityTimeout": benchVisibility,
		},
	})
	if err != nil {
		return "", nil, fmt.Errorf("bench: create queue %s on %s (is the emulator up? make up): %w", name, endpoint, err)
	}
	queueURL := aws.ToString(out.QueueUrl)
	return queueURL, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
		defer cancel()
		_, _ = api.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(queueURL)})
	}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
