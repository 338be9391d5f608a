// Package dashboards checks Kerf's monitoring against the real parts: the
// Grafana dashboard (dashboards/kerf.json), the alerts
// (alerts/kerf-rules.yaml) and the Prometheus Operator component
// (manifests/monitoring/). Every panel query and every alert expression is
// run on a real Prometheus scraping a real kerf-agent (the binary, over
// real cgroups) and a real leader (in this process, on a real apiserver),
// as a service account bound to kerf-metrics-reader (docs/monitoring.md).
package dashboards
