// Command goplugin is a small Nomad device plugin written directly on
// go-plugin's server and the stubs generated from this repository's .proto
// files. Every regular file in the configured directory is one device.
//
// Config (HCL, as the agent would hold it):
//
//	config {
//	  dir         = "/some/dir"   # default "."
//	  list_period = "5s"          # default "5s"; how often the dir is re-read
//	}
//
// It exists so the SDK's Python host client can be checked against a plugin
// that the real go-plugin server runs.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"interop/gen/basepb"
	"interop/gen/devicepb"
	"interop/gen/hclspecpb"
	"interop/gen/structspb"
	"interop/internal/nomadplug"
)

const (
	pluginName    = "go-files"
	pluginVersion = "0.2.0"
	apiVersion    = "v0.1.0"

	vendor     = "interop"
	deviceType = "file"
	groupName  = "gofile"

	defaultDir    = "."
	defaultPeriod = "5s"
)

// settings is the decoded config.
type settings struct {
	dir    string
	period time.Duration
}

// wireConfig mirrors the config object as Nomad encodes it (cty msgpack: a
// map with the attribute names as keys; a null where nothing was set).
type wireConfig struct {
	Dir        *string `msgpack:"dir"`
	ListPeriod *string `msgpack:"list_period"`
}

type filesPlugin struct {
	basepb.UnimplementedBasePluginServer
	devicepb.UnimplementedDevicePluginServer

	log hclog.Logger

	mu  sync.Mutex
	cfg settings
}

func main() {
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "goplugin",
		Level:      hclog.Trace,
		Output:     os.Stderr,
		JSONFormat: true,
	})
	p := &filesPlugin{log: logger, cfg: settings{dir: defaultDir, period: mustDuration(defaultPeriod)}}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: nomadplug.Handshake,
		Plugins: map[string]plugin.Plugin{
			nomadplug.BaseName:   &nomadplug.Base{Impl: p},
			nomadplug.DeviceName: &nomadplug.Device{Impl: p},
		},
		GRPCServer: plugin.DefaultGRPCServer,
		Logger:     logger,
	})
}

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

func (p *filesPlugin) settings() settings {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// ---- base service ---------------------------------------------------------------

func (p *filesPlugin) PluginInfo(context.Context, *basepb.PluginInfoRequest) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{
		Type:              basepb.PluginType_DEVICE,
		PluginApiVersions: []string{apiVersion},
		PluginVersion:     pluginVersion,
		Name:              pluginName,
	}, nil
}

// stringWithDefault is the schema of an optional string attribute whose
// default is the given HCL string literal.
func stringWithDefault(name, def string) *hclspecpb.Spec {
	return &hclspecpb.Spec{Block: &hclspecpb.Spec_Default{Default: &hclspecpb.Default{
		Primary: &hclspecpb.Spec{Block: &hclspecpb.Spec_Attr{Attr: &hclspecpb.Attr{
			Name: name,
			Type: "string",
		}}},
		Default: &hclspecpb.Spec{Block: &hclspecpb.Spec_Literal{Literal: &hclspecpb.Literal{
			Value: fmt.Sprintf("%q", def),
		}}},
	}}}
}

func (p *filesPlugin) ConfigSchema(context.Context, *basepb.ConfigSchemaRequest) (*basepb.ConfigSchemaResponse, error) {
	return &basepb.ConfigSchemaResponse{Spec: &hclspecpb.Spec{Block: &hclspecpb.Spec_Object{
		Object: &hclspecpb.Object{Attributes: map[string]*hclspecpb.Spec{
			"dir":         stringWithDefault("dir", defaultDir),
			"list_period": stringWithDefault("list_period", defaultPeriod),
		}},
	}}}, nil
}

func (p *filesPlugin) SetConfig(_ context.Context, req *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	if v := req.GetPluginApiVersion(); v != "" && v != apiVersion {
		return nil, status.Errorf(codes.InvalidArgument, "plugin API version %q is not supported (want %s)", v, apiVersion)
	}
	cfg, err := decodeConfig(req.GetMsgpackConfig())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p.mu.Lock()
	p.cfg = cfg
	p.mu.Unlock()
	p.log.Info("configured", "dir", cfg.dir, "list_period", cfg.period.String())
	return &basepb.SetConfigResponse{}, nil
}

// decodeConfig turns the msgpack config into settings; empty bytes mean
// "all defaults".
func decodeConfig(raw []byte) (settings, error) {
	var w wireConfig
	if len(raw) > 0 {
		if err := msgpack.Unmarshal(raw, &w); err != nil {
			return settings{}, fmt.Errorf("config is not a msgpack object with string dir/list_period: %v", err)
		}
	}
	s := settings{dir: defaultDir}
	if w.Dir != nil && *w.Dir != "" {
		s.dir = *w.Dir
	}
	period := defaultPeriod
	if w.ListPeriod != nil && *w.ListPeriod != "" {
		period = *w.ListPeriod
	}
	d, err := time.ParseDuration(period)
	if err != nil || d <= 0 {
		return settings{}, fmt.Errorf("list_period: %q is not a positive duration such as \"5s\"", period)
	}
	s.period = d
	info, err := os.Stat(s.dir)
	if err != nil {
		return settings{}, fmt.Errorf("dir: %v", err)
	}
	if !info.IsDir() {
		return settings{}, fmt.Errorf("dir: %q is not a directory", s.dir)
	}
	return s, nil
}

// ---- device service -------------------------------------------------------------

// listFiles returns the regular files of dir, sorted by name.
func listFiles(dir string) ([]os.FileInfo, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []os.FileInfo
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		files = append(files, info)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name() < files[j].Name() })
	return files, nil
}

func (p *filesPlugin) groups(cfg settings) ([]*devicepb.DeviceGroup, []string, error) {
	files, err := listFiles(cfg.dir)
	if err != nil {
		return nil, nil, err
	}
	if len(files) == 0 {
		return []*devicepb.DeviceGroup{}, nil, nil
	}
	abs, err := filepath.Abs(cfg.dir)
	if err != nil {
		abs = cfg.dir
	}
	names := make([]string, 0, len(files))
	devices := make([]*devicepb.DetectedDevice, 0, len(files))
	for _, f := range files {
		names = append(names, f.Name())
		devices = append(devices, &devicepb.DetectedDevice{ID: f.Name(), Healthy: true})
	}
	return []*devicepb.DeviceGroup{{
		Vendor:     vendor,
		DeviceType: deviceType,
		DeviceName: groupName,
		Devices:    devices,
		Attributes: map[string]*structspb.Attribute{
			"dir":   {Value: &structspb.Attribute_StringVal{StringVal: abs}},
			"files": {Value: &structspb.Attribute_IntVal{IntVal: int64(len(files))}},
		},
	}}, names, nil
}

func (p *filesPlugin) Fingerprint(_ *devicepb.FingerprintRequest, stream devicepb.DevicePlugin_FingerprintServer) error {
	ctx := stream.Context()
	var last []string
	sent := false
	for {
		cfg := p.settings()
		groups, names, err := p.groups(cfg)
		if err != nil {
			// Ending the stream would make Nomad drop the plugin until the
			// agent restarts: log, keep the last state, retry next period.
			// The first message still goes out at once, empty.
			p.log.Warn("listing devices failed", "dir", cfg.dir, "error", err)
			groups, names = []*devicepb.DeviceGroup{}, last
		}
		if !sent || !slices.Equal(names, last) {
			if err := stream.Send(&devicepb.FingerprintResponse{DeviceGroup: groups}); err != nil {
				return err
			}
			p.log.Debug("fingerprint sent", "devices", len(names))
			sent, last = true, names
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cfg.period):
		}
	}
}

func (p *filesPlugin) Reserve(_ context.Context, req *devicepb.ReserveRequest) (*devicepb.ReserveResponse, error) {
	ids := req.GetDeviceIds()
	if len(ids) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no device IDs given")
	}
	cfg := p.settings()
	files, err := listFiles(cfg.dir)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing %s: %v", cfg.dir, err)
	}
	known := map[string]bool{}
	for _, f := range files {
		known[f.Name()] = true
	}
	var unknown []string
	for _, id := range ids {
		if !known[id] {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "unknown device IDs: %s", strings.Join(unknown, ", "))
	}
	abs, err := filepath.Abs(cfg.dir)
	if err != nil {
		abs = cfg.dir
	}
	mounts := make([]*devicepb.Mount, 0, len(ids))
	for _, id := range ids {
		mounts = append(mounts, &devicepb.Mount{
			TaskPath: "/dev/gofile/" + id,
			HostPath: filepath.Join(abs, id),
			ReadOnly: true,
		})
	}
	p.log.Info("reserved", "ids", strings.Join(ids, ","))
	return &devicepb.ReserveResponse{ContainerRes: &devicepb.ContainerReservation{
		Envs:   map[string]string{"GOFILE_DEVICES": strings.Join(ids, ",")},
		Mounts: mounts,
	}}, nil
}

func (p *filesPlugin) Stats(req *devicepb.StatsRequest, stream devicepb.DevicePlugin_StatsServer) error {
	ctx := stream.Context()
	interval := req.GetCollectionInterval().AsDuration()
	if interval <= 0 {
		interval = time.Second
	}
	for {
		cfg := p.settings()
		files, err := listFiles(cfg.dir)
		if err != nil {
			p.log.Warn("collecting stats failed", "dir", cfg.dir, "error", err)
		} else if err := stream.Send(statsResponse(files)); err != nil {
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

func statsResponse(files []os.FileInfo) *devicepb.StatsResponse {
	now := timestamppb.Now()
	instances := make(map[string]*devicepb.DeviceStats, len(files))
	for _, f := range files {
		instances[f.Name()] = &devicepb.DeviceStats{
			Summary: &structspb.StatValue{
				IntNumeratorVal: wrapperspb.Int64(f.Size()),
				Unit:            "bytes",
				Desc:            "file size",
			},
			Timestamp: now,
		}
	}
	groups := []*devicepb.DeviceGroupStats{}
	if len(files) > 0 {
		groups = append(groups, &devicepb.DeviceGroupStats{
			Vendor:        vendor,
			Type:          deviceType,
			Name:          groupName,
			InstanceStats: instances,
		})
	}
	return &devicepb.StatsResponse{Groups: groups}
}
