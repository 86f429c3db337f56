package main

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metric descriptions. IOPS is rate(srptd_lun_commands_total).
var (
	descLUNCommands = prometheus.NewDesc("srptd_lun_commands_total", "SCSI commands completed by the logical unit (aborted ones excluded).", []string{"lun", "name"}, nil)
	descLUNRead     = prometheus.NewDesc("srptd_lun_read_bytes_total", "Data-in bytes returned by the logical unit.", []string{"lun", "name"}, nil)
	descLUNWrite    = prometheus.NewDesc("srptd_lun_write_bytes_total", "Data-out bytes consumed by the logical unit.", []string{"lun", "name"}, nil)
	descLUNErrors   = prometheus.NewDesc("srptd_lun_errors_total", "Commands completed with a status other than GOOD, unit attentions excluded.", []string{"lun", "name"}, nil)
	descLUNUAs      = prometheus.NewDesc("srptd_lun_unit_attentions_total", "Commands answered CHECK CONDITION with sense key UNIT ATTENTION (a reset or a change reported to the initiator).", []string{"lun", "name"}, nil)
	descLUNAborted  = prometheus.NewDesc("srptd_lun_aborted_total", "Commands aborted by a task management function or a channel loss.", []string{"lun", "name"}, nil)
	descLUNInFlight = prometheus.NewDesc("srptd_lun_commands_in_flight", "Commands in progress in the logical unit.", []string{"lun", "name"}, nil)
	descLUNLatency  = prometheus.NewDesc("srptd_lun_command_duration_seconds", "Command latency in the SCSI core (data transfer excluded), seconds.", []string{"lun", "name"}, nil)
	descChReqLim    = prometheus.NewDesc("srptd_channel_req_lim", "Credits (req_lim) the initiator holds on the channel, in IUs.", []string{"port", "channel", "initiator"}, nil)
	descChQueue     = prometheus.NewDesc("srptd_channel_queue_depth", "SRP_CMDs and SRP_TSK_MGMTs in progress on the channel.", []string{"port", "channel", "initiator"}, nil)
	descChCommands  = prometheus.NewDesc("srptd_channel_commands_total", "SRP_CMDs received on the channel.", []string{"port", "channel", "initiator"}, nil)
)

// collector reads the daemon's counters at scrape time.
type collector struct{ d *daemon }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLUNCommands, descLUNRead, descLUNWrite, descLUNErrors, descLUNUAs, descLUNAborted, descLUNInFlight, descLUNLatency, descChReqLim, descChQueue, descChCommands} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.d.mu.Lock()
	type lun struct {
		n    uint64
		name string
		st   *lunStats
	}
	var luns []lun
	for _, n := range slices.Sorted(maps.Keys(c.d.luns)) {
		luns = append(luns, lun{n, c.d.luns[n].sec.Name, c.d.luns[n].stats})
	}
	c.d.mu.Unlock()
	for _, l := range luns {
		labels := []string{strconv.FormatUint(l.n, 10), l.name}
		s := l.st.snapshot()
		ch <- prometheus.MustNewConstMetric(descLUNCommands, prometheus.CounterValue, float64(s.Commands), labels...)
		ch <- prometheus.MustNewConstMetric(descLUNRead, prometheus.CounterValue, float64(s.ReadBytes), labels...)
		ch <- prometheus.MustNewConstMetric(descLUNWrite, prometheus.CounterValue, float64(s.WriteBytes), labels...)
		ch <- prometheus.MustNewConstMetric(descLUNErrors, prometheus.CounterValue, float64(s.Errors), labels...)
		ch <- prometheus.MustNewConstMetric(descLUNUAs, prometheus.CounterValue, float64(s.UnitAttentions), labels...)
		ch <- prometheus.MustNewConstMetric(descLUNAborted, prometheus.CounterValue, float64(s.Aborted), labels...)
		ch <- prometheus.MustNewConstMetric(descLUNInFlight, prometheus.GaugeValue, float64(s.InFlight), labels...)
		buckets, count, sum := l.st.histogram()
		ch <- prometheus.MustNewConstHistogram(descLUNLatency, count, sum, buckets, labels...)
	}
	for _, s := range c.d.Sessions() {
		labels := []string{s.Port, strconv.FormatUint(s.Channel, 10), s.InitiatorPort}
		ch <- prometheus.MustNewConstMetric(descChReqLim, prometheus.GaugeValue, float64(s.ReqLim), labels...)
		ch <- prometheus.MustNewConstMetric(descChQueue, prometheus.GaugeValue, float64(s.Outstanding), labels...)
		ch <- prometheus.MustNewConstMetric(descChCommands, prometheus.CounterValue, float64(s.Commands), labels...)
	}
}

// metricsServer serves /metrics (Prometheus text format).
type metricsServer struct {
	srv *http.Server
	l   net.Listener
}

func startMetrics(addr string, d *daemon, log *slog.Logger) (*metricsServer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(collector{d}); err != nil {
		l.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}))
	m := &metricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, l: l}
	go func() {
		if err := m.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	log.Info("metrics listening", "addr", l.Addr())
	return m, nil
}

// Addr is the bound address.
func (m *metricsServer) Addr() net.Addr { return m.l.Addr() }

func (m *metricsServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
}
