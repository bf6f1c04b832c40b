// Package deploy holds no code: it is the home of sluice's deployment
// files (the container image's Dockerfile, the systemd unit and example
// configurations, the Helm chart, the compose file, the Grafana dashboard)
// and of the tests that check them against the real binary.
// docs/operations.md describes each.
package deploy
