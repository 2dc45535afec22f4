// Command gohost drives a device plugin through the real go-plugin client,
// configured the way a Nomad agent's plugin loader configures it (Nomad's
// handshake, gRPC only, the executable plus its arguments, an hclog logger),
// and prints one JSON report on stdout.
//
//	gohost [flags] -- EXECUTABLE [ARGS...]   launch, call everything, Kill
//	gohost -print-reattach -- EXECUTABLE     launch, PluginInfo, print the
//	                                         reattach config, wait for stdin, Kill
//	gohost -reattach '{"network":..,"address":..,"pid":..}'
//	                                         reattach, PluginInfo, Kill
//
// Every go-plugin log record (its own and the plugin's stderr lines it
// re-logs) is captured through an hclog sink and reported with its level.
// How Kill ended is read from go-plugin's own records: it logs "plugin exited"
// at debug when the process left after the Shutdown call, and "plugin failed
// to exit gracefully" at warn before it resorts to killing the process.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"interop/gen/basepb"
	"interop/gen/devicepb"
	"interop/gen/hclspecpb"
	"interop/gen/structspb"
	"interop/internal/nomadplug"
)

// The API version Nomad's device manager negotiates.
const deviceAPIVersion = "v0.1.0"

// go-plugin's own messages that tell how Kill ended.
const (
	msgExited    = "plugin exited"
	msgForced    = "plugin failed to exit gracefully"
	msgCloseFail = "error closing client during Kill"
)

type options struct {
	autoMTLS       bool
	reattach       string
	printReattach  bool
	configHex      string
	configBase64   string
	reserve        idLists
	fingerprintTTL time.Duration
	statsTTL       time.Duration
	statsInterval  time.Duration
	callTimeout    time.Duration
	startTimeout   time.Duration
	quiet          bool
	command        []string
}

// idLists collects repeated -reserve flags, each a comma-separated ID list.
type idLists [][]string

func (l *idLists) String() string { return fmt.Sprint(*l) }

func (l *idLists) Set(v string) error {
	ids := []string{}
	if v != "" {
		ids = strings.Split(v, ",")
	}
	*l = append(*l, ids)
	return nil
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "gohost:", err)
		os.Exit(2)
	}
	rep := run(opts)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, "gohost: writing report:", err)
		os.Exit(1)
	}
	if rep.Error != "" {
		os.Exit(1)
	}
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gohost", flag.ContinueOnError)
	fs.BoolVar(&o.autoMTLS, "auto-mtls", false, "set go-plugin's AutoMTLS")
	fs.StringVar(&o.reattach, "reattach", "", "reattach config JSON {network,address,pid}: reattach instead of launching")
	fs.BoolVar(&o.printReattach, "print-reattach", false, "print the reattach config as one JSON line, then wait for a line (or EOF) on stdin before Kill")
	fs.StringVar(&o.configHex, "config-hex", "", "SetConfig msgpack bytes, hex")
	fs.StringVar(&o.configBase64, "config-base64", "", "SetConfig msgpack bytes, base64")
	fs.Var(&o.reserve, "reserve", "device IDs for one Reserve call, comma-separated (repeat for more calls)")
	fs.DurationVar(&o.fingerprintTTL, "fingerprint-timeout", 20*time.Second, "wait for the first Fingerprint message")
	fs.DurationVar(&o.statsTTL, "stats-timeout", 20*time.Second, "wait for the first Stats message")
	fs.DurationVar(&o.statsInterval, "stats-interval", time.Second, "Stats collection interval sent to the plugin")
	fs.DurationVar(&o.callTimeout, "call-timeout", 30*time.Second, "deadline of each unary call")
	fs.DurationVar(&o.startTimeout, "start-timeout", time.Minute, "go-plugin's wait for the handshake")
	fs.BoolVar(&o.quiet, "quiet", false, "do not echo go-plugin's log on stderr")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.command = fs.Args()
	switch {
	case o.reattach != "" && len(o.command) > 0:
		return nil, errors.New("give either -reattach or a command, not both")
	case o.reattach == "" && len(o.command) == 0:
		return nil, errors.New("no plugin command given (gohost [flags] -- EXECUTABLE [ARGS...])")
	case o.reattach != "" && (o.autoMTLS || o.printReattach):
		return nil, errors.New("-reattach cannot be combined with -auto-mtls or -print-reattach")
	case o.configHex != "" && o.configBase64 != "":
		return nil, errors.New("give at most one of -config-hex and -config-base64")
	}
	return o, nil
}

// ---- report ----------------------------------------------------------------

type report struct {
	Mode        string         `json:"mode"`
	Command     []string       `json:"command,omitempty"`
	AutoMTLS    bool           `json:"auto_mtls"`
	PID         int            `json:"pid,omitempty"`
	Reattach    *reattachJSON  `json:"reattach,omitempty"`
	Negotiated  int            `json:"negotiated_version,omitempty"`
	PluginInfo  *callResult    `json:"plugin_info,omitempty"`
	Schema      *callResult    `json:"config_schema,omitempty"`
	SetConfig   *callResult    `json:"set_config,omitempty"`
	Fingerprint *callResult    `json:"fingerprint,omitempty"`
	Reserve     []reserveEntry `json:"reserve,omitempty"`
	Stats       *callResult    `json:"stats,omitempty"`
	Kill        *killReport    `json:"kill,omitempty"`
	Logs        []logRecord    `json:"logs"`
	Error       string         `json:"error,omitempty"`
}

type callResult struct {
	OK      bool       `json:"ok"`
	Value   any        `json:"value,omitempty"`
	Error   *callError `json:"error,omitempty"`
	Invalid []string   `json:"invalid,omitempty"` // what Nomad would reject
	Millis  float64    `json:"ms"`
}

type callError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type reserveEntry struct {
	IDs []string `json:"ids"`
	callResult
}

type killReport struct {
	Outcome     string   `json:"outcome"` // graceful | forced | unknown
	Millis      float64  `json:"ms"`
	Messages    []string `json:"messages"` // go-plugin's own records during Kill
	ProcessGone bool     `json:"process_gone"`
}

type reattachJSON struct {
	Network         string `json:"network"`
	Address         string `json:"address"`
	PID             int    `json:"pid"`
	Protocol        string `json:"protocol,omitempty"`
	ProtocolVersion int    `json:"protocol_version,omitempty"`
}

// ---- log capture -------------------------------------------------------------

type logRecord struct {
	Level   string         `json:"level"`
	Module  string         `json:"module"`
	Message string         `json:"message"`
	Fields  map[string]any `json:"fields,omitempty"`
}

// sink is an hclog.SinkAdapter that keeps every record in order.
type sink struct {
	mu      sync.Mutex
	records []logRecord
}

func (s *sink) Accept(name string, level hclog.Level, msg string, args ...interface{}) {
	rec := logRecord{Level: level.String(), Module: name, Message: msg}
	for i := 0; i+1 < len(args); i += 2 {
		if rec.Fields == nil {
			rec.Fields = map[string]any{}
		}
		rec.Fields[fmt.Sprint(args[i])] = jsonable(args[i+1])
	}
	if len(args)%2 == 1 {
		if rec.Fields == nil {
			rec.Fields = map[string]any{}
		}
		rec.Fields["EXTRA_VALUE_AT_END"] = jsonable(args[len(args)-1])
	}
	s.mu.Lock()
	s.records = append(s.records, rec)
	s.mu.Unlock()
}

func (s *sink) snapshot() []logRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]logRecord(nil), s.records...)
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

func jsonable(v any) any {
	switch x := v.(type) {
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	case time.Duration:
		return x.String()
	}
	if _, err := json.Marshal(v); err != nil {
		return fmt.Sprintf("%v", v)
	}
	return v
}

// ---- the run -------------------------------------------------------------------

func run(o *options) *report {
	rec := &sink{}
	var echo io.Writer = os.Stderr
	if o.quiet {
		echo = io.Discard
	}
	logger := hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:   "gohost",
		Level:  hclog.Trace,
		Output: echo,
	})
	logger.RegisterSink(rec)

	rep := &report{Mode: "launch", Command: o.command, AutoMTLS: o.autoMTLS}
	cfg := &plugin.ClientConfig{
		HandshakeConfig: nomadplug.Handshake,
		Plugins: map[string]plugin.Plugin{
			nomadplug.BaseName:   &nomadplug.Base{},
			nomadplug.DeviceName: &nomadplug.Device{},
		},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           logger,
		AutoMTLS:         o.autoMTLS,
		StartTimeout:     o.startTimeout,
	}
	if o.reattach != "" {
		rep.Mode = "reattach"
		rc, parsed, err := parseReattach(o.reattach)
		if err != nil {
			rep.Error = err.Error()
			rep.Logs = rec.snapshot()
			return rep
		}
		rep.Reattach = parsed
		rep.PID = parsed.PID
		cfg.Reattach = rc
	} else {
		cfg.Cmd = exec.Command(o.command[0], o.command[1:]...)
	}

	client := plugin.NewClient(cfg)
	finish := func() *report {
		rep.Kill = kill(client, rec, rep.PID)
		rep.Logs = rec.snapshot()
		return rep
	}

	rpc, err := client.Client()
	if err != nil {
		rep.Error = "connect: " + err.Error()
		return finish()
	}
	if rc := client.ReattachConfig(); rc != nil {
		rep.PID = rc.Pid
		if rep.Reattach == nil {
			rep.Reattach = toReattachJSON(rc)
		}
	}
	rep.Negotiated = client.NegotiatedVersion()

	base, err := dispense(rpc, nomadplug.BaseName)
	if err != nil {
		rep.Error = err.Error()
		return finish()
	}
	rep.PluginInfo = call(o.callTimeout, func(ctx context.Context) (any, []string, error) {
		return pluginInfo(ctx, base)
	})

	if o.reattach != "" {
		return finish()
	}
	if o.printReattach {
		line, _ := json.Marshal(rep.Reattach)
		fmt.Fprintln(os.Stdout, string(line))
		// Block until the test says go (or closes our stdin, or kills us).
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		return finish()
	}

	dev, err := dispense(rpc, nomadplug.DeviceName)
	if err != nil {
		rep.Error = err.Error()
		return finish()
	}
	config, err := configBytes(o)
	if err != nil {
		rep.Error = err.Error()
		return finish()
	}

	rep.Schema = call(o.callTimeout, func(ctx context.Context) (any, []string, error) {
		return configSchema(ctx, dev)
	})
	rep.SetConfig = call(o.callTimeout, func(ctx context.Context) (any, []string, error) {
		_, err := dev.Base.SetConfig(ctx, &basepb.SetConfigRequest{
			MsgpackConfig:    config,
			PluginApiVersion: deviceAPIVersion,
			NomadConfig: &basepb.NomadConfig{Driver: &basepb.NomadDriverConfig{
				ClientMinPort: 14000,
				ClientMaxPort: 14512,
			}},
		})
		return nil, nil, err
	})
	rep.Fingerprint = call(o.fingerprintTTL, func(ctx context.Context) (any, []string, error) {
		return fingerprint(ctx, dev)
	})
	for _, ids := range o.reserve {
		res := call(o.callTimeout, func(ctx context.Context) (any, []string, error) {
			return reserve(ctx, dev, ids)
		})
		rep.Reserve = append(rep.Reserve, reserveEntry{IDs: ids, callResult: *res})
	}
	rep.Stats = call(o.statsTTL, func(ctx context.Context) (any, []string, error) {
		return stats(ctx, dev, o.statsInterval)
	})
	return finish()
}

func dispense(rpc plugin.ClientProtocol, name string) (*nomadplug.Clients, error) {
	raw, err := rpc.Dispense(name)
	if err != nil {
		return nil, fmt.Errorf("dispense %s: %w", name, err)
	}
	c, ok := raw.(*nomadplug.Clients)
	if !ok {
		return nil, fmt.Errorf("dispense %s: unexpected type %T", name, raw)
	}
	return c, nil
}

func configBytes(o *options) ([]byte, error) {
	switch {
	case o.configHex != "":
		b, err := hex.DecodeString(o.configHex)
		if err != nil {
			return nil, fmt.Errorf("-config-hex: %w", err)
		}
		return b, nil
	case o.configBase64 != "":
		b, err := base64.StdEncoding.DecodeString(o.configBase64)
		if err != nil {
			return nil, fmt.Errorf("-config-base64: %w", err)
		}
		return b, nil
	}
	return []byte{}, nil
}

func parseReattach(text string) (*plugin.ReattachConfig, *reattachJSON, error) {
	var r reattachJSON
	if err := json.Unmarshal([]byte(text), &r); err != nil {
		return nil, nil, fmt.Errorf("-reattach: %w", err)
	}
	var addr net.Addr
	var err error
	switch r.Network {
	case "unix":
		addr, err = net.ResolveUnixAddr("unix", r.Address)
	case "tcp":
		addr, err = net.ResolveTCPAddr("tcp", r.Address)
	default:
		err = fmt.Errorf("network must be unix or tcp, not %q", r.Network)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("-reattach: %w", err)
	}
	if r.PID <= 0 {
		return nil, nil, errors.New("-reattach: pid missing")
	}
	version := r.ProtocolVersion
	if version == 0 {
		version = int(nomadplug.Handshake.ProtocolVersion)
	}
	return &plugin.ReattachConfig{
		Protocol:        plugin.ProtocolGRPC,
		ProtocolVersion: version,
		Addr:            addr,
		Pid:             r.PID,
	}, &r, nil
}

func toReattachJSON(rc *plugin.ReattachConfig) *reattachJSON {
	return &reattachJSON{
		Network:         rc.Addr.Network(),
		Address:         rc.Addr.String(),
		PID:             rc.Pid,
		Protocol:        string(rc.Protocol),
		ProtocolVersion: rc.ProtocolVersion,
	}
}

// call runs fn under a deadline and records its outcome.
func call(timeout time.Duration, fn func(context.Context) (any, []string, error)) *callResult {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	value, invalid, err := fn(ctx)
	res := &callResult{Millis: ms(time.Since(start)), Value: value, Invalid: invalid}
	if err != nil {
		st := status.Convert(err)
		res.Error = &callError{Code: st.Code().String(), Message: st.Message()}
		return res
	}
	res.OK = true
	return res
}

func ms(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// kill calls go-plugin's Kill and classifies the ending from the records it
// logged meanwhile.
func kill(client *plugin.Client, rec *sink, pid int) *killReport {
	before := rec.count()
	start := time.Now()
	client.Kill()
	k := &killReport{Millis: ms(time.Since(start)), Messages: []string{}}
	var exited, forced bool
	for _, r := range rec.snapshot()[before:] {
		if r.Module != "gohost" {
			continue // the plugin's own lines, re-logged under a sub-logger
		}
		k.Messages = append(k.Messages, r.Level+": "+r.Message)
		switch r.Message {
		case msgExited:
			exited = true
		case msgForced, msgCloseFail:
			forced = true
		}
	}
	switch {
	case forced:
		k.Outcome = "forced"
	case exited:
		k.Outcome = "graceful"
	default:
		k.Outcome = "unknown"
	}
	k.ProcessGone = pid > 0 && !processAlive(pid)
	return k
}

// processAlive: signal 0 reaches it and it is not a zombie.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return errors.Is(err, syscall.EPERM)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

// ---- the calls, decoded into JSON-friendly values --------------------------------

var semverish = regexp.MustCompile(`^v?\d+\.\d+\.\d+([-+].*)?$`)

func pluginInfo(ctx context.Context, c *nomadplug.Clients) (any, []string, error) {
	resp, err := c.Base.PluginInfo(ctx, &basepb.PluginInfoRequest{})
	if err != nil {
		return nil, nil, err
	}
	var invalid []string
	if resp.GetType() != basepb.PluginType_DEVICE {
		invalid = append(invalid, fmt.Sprintf("type %s is not DEVICE", resp.GetType()))
	}
	if !contains(resp.GetPluginApiVersions(), deviceAPIVersion) {
		invalid = append(invalid, "plugin_api_versions lacks "+deviceAPIVersion)
	}
	if !semverish.MatchString(resp.GetPluginVersion()) {
		invalid = append(invalid, fmt.Sprintf("plugin_version %q is not a version", resp.GetPluginVersion()))
	}
	return map[string]any{
		"type":                resp.GetType().String(),
		"name":                resp.GetName(),
		"plugin_version":      resp.GetPluginVersion(),
		"plugin_api_versions": nonNil(resp.GetPluginApiVersions()),
	}, invalid, nil
}

func configSchema(ctx context.Context, c *nomadplug.Clients) (any, []string, error) {
	resp, err := c.Base.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil {
		return nil, nil, err
	}
	spec := resp.GetSpec()
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(spec)
	if err != nil {
		return nil, nil, err
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		return nil, nil, err
	}
	var invalid []string
	if spec == nil || spec.GetBlock() == nil {
		invalid = append(invalid, "empty schema")
	}
	return map[string]any{"spec": tree, "fields": topFields(spec)}, invalid, nil
}

// topFields lists the attribute names of a top-level Object spec.
func topFields(spec *hclspecpb.Spec) []string {
	names := []string{}
	for name := range spec.GetObject().GetAttributes() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func fingerprint(ctx context.Context, c *nomadplug.Clients) (any, []string, error) {
	stream, err := c.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		return nil, nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, nil, err
	}
	groups := []any{}
	var invalid []string
	for i, g := range resp.GetDeviceGroup() {
		groups = append(groups, groupJSON(g))
		for _, problem := range validateGroup(g) {
			invalid = append(invalid, fmt.Sprintf("group %d: %s", i, problem))
		}
	}
	return map[string]any{"groups": groups}, invalid, nil
}

func groupJSON(g *devicepb.DeviceGroup) map[string]any {
	devices := []any{}
	for _, d := range g.GetDevices() {
		dev := map[string]any{
			"id":                 d.GetID(),
			"healthy":            d.GetHealthy(),
			"health_description": d.GetHealthDescription(),
		}
		if loc := d.GetHwLocality(); loc != nil {
			dev["pci_bus_id"] = loc.GetPciBusId()
		}
		devices = append(devices, dev)
	}
	attrs := map[string]any{}
	for k, a := range g.GetAttributes() {
		attrs[k] = attributeJSON(a)
	}
	return map[string]any{
		"vendor":     g.GetVendor(),
		"type":       g.GetDeviceType(),
		"name":       g.GetDeviceName(),
		"devices":    devices,
		"attributes": attrs,
	}
}

// validateGroup applies the checks Nomad's device manager makes before it
// accepts a fingerprint.
func validateGroup(g *devicepb.DeviceGroup) []string {
	var out []string
	if g.GetVendor() == "" {
		out = append(out, "vendor is empty")
	}
	if g.GetDeviceType() == "" {
		out = append(out, "type is empty")
	}
	if g.GetDeviceName() == "" {
		out = append(out, "name is empty")
	}
	for i, d := range g.GetDevices() {
		if d.GetID() == "" {
			out = append(out, fmt.Sprintf("device %d has no ID", i))
		}
	}
	for k, a := range g.GetAttributes() {
		if a.GetValue() == nil {
			out = append(out, fmt.Sprintf("attribute %q has no value", k))
		}
	}
	return out
}

func attributeJSON(a *structspb.Attribute) map[string]any {
	out := map[string]any{}
	switch v := a.GetValue().(type) {
	case *structspb.Attribute_IntVal:
		out["int"] = v.IntVal
	case *structspb.Attribute_FloatVal:
		out["float"] = v.FloatVal
	case *structspb.Attribute_StringVal:
		out["string"] = v.StringVal
	case *structspb.Attribute_BoolVal:
		out["bool"] = v.BoolVal
	}
	if a.GetUnit() != "" {
		out["unit"] = a.GetUnit()
	}
	return out
}

func reserve(ctx context.Context, c *nomadplug.Clients, ids []string) (any, []string, error) {
	resp, err := c.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: ids})
	if err != nil {
		return nil, nil, err
	}
	res := resp.GetContainerRes()
	envs := map[string]string{}
	for k, v := range res.GetEnvs() {
		envs[k] = v
	}
	mounts := []any{}
	for _, m := range res.GetMounts() {
		mounts = append(mounts, map[string]any{
			"task_path": m.GetTaskPath(),
			"host_path": m.GetHostPath(),
			"read_only": m.GetReadOnly(),
		})
	}
	devices := []any{}
	for _, d := range res.GetDevices() {
		devices = append(devices, map[string]any{
			"task_path":   d.GetTaskPath(),
			"host_path":   d.GetHostPath(),
			"permissions": d.GetPermissions(),
		})
	}
	return map[string]any{"envs": envs, "mounts": mounts, "devices": devices}, nil, nil
}

func stats(ctx context.Context, c *nomadplug.Clients, interval time.Duration) (any, []string, error) {
	stream, err := c.Device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(interval)})
	if err != nil {
		return nil, nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, nil, err
	}
	groups := []any{}
	for _, g := range resp.GetGroups() {
		instances := map[string]any{}
		for id, s := range g.GetInstanceStats() {
			inst := map[string]any{"summary": statValueJSON(s.GetSummary())}
			if s.GetStats() != nil {
				inst["stats"] = statObjectJSON(s.GetStats())
			}
			if s.GetTimestamp() != nil {
				inst["timestamp"] = s.GetTimestamp().AsTime().Format(time.RFC3339Nano)
			}
			instances[id] = inst
		}
		groups = append(groups, map[string]any{
			"vendor":         g.GetVendor(),
			"type":           g.GetType(),
			"name":           g.GetName(),
			"instance_stats": instances,
		})
	}
	return map[string]any{"groups": groups}, nil, nil
}

func statValueJSON(v *structspb.StatValue) map[string]any {
	if v == nil {
		return nil
	}
	out := map[string]any{}
	if x := v.GetFloatNumeratorVal(); x != nil {
		out["float_numerator"] = x.GetValue()
	}
	if x := v.GetFloatDenominatorVal(); x != nil {
		out["float_denominator"] = x.GetValue()
	}
	if x := v.GetIntNumeratorVal(); x != nil {
		out["int_numerator"] = x.GetValue()
	}
	if x := v.GetIntDenominatorVal(); x != nil {
		out["int_denominator"] = x.GetValue()
	}
	if x := v.GetStringVal(); x != nil {
		out["string"] = x.GetValue()
	}
	if x := v.GetBoolVal(); x != nil {
		out["bool"] = x.GetValue()
	}
	if v.GetUnit() != "" {
		out["unit"] = v.GetUnit()
	}
	if v.GetDesc() != "" {
		out["desc"] = v.GetDesc()
	}
	return out
}

func statObjectJSON(o *structspb.StatObject) map[string]any {
	nested := map[string]any{}
	for k, n := range o.GetNested() {
		nested[k] = statObjectJSON(n)
	}
	attrs := map[string]any{}
	for k, v := range o.GetAttributes() {
		attrs[k] = statValueJSON(v)
	}
	return map[string]any{"nested": nested, "attributes": attrs}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func nonNil(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}
