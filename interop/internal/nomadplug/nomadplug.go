// Package nomadplug holds what both interop binaries share: the handshake a
// Nomad agent uses for its plugins and go-plugin Plugin types for the two
// services a device plugin serves ("base" and "device", the names Nomad's
// plugin map uses), built on the stubs generated from this repository's own
// .proto files.
package nomadplug

import (
	"context"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"interop/gen/basepb"
	"interop/gen/devicepb"
)

// Names under which a Nomad agent dispenses the two services.
const (
	BaseName   = "base"
	DeviceName = "device"
)

// Handshake is the go-plugin handshake of every Nomad plugin.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  2,
	MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
}

// Clients is what dispensing either plugin name returns on the host side.
// Done is go-plugin's context that ends when the plugin process exits.
type Clients struct {
	Base   basepb.BasePluginClient
	Device devicepb.DevicePluginClient
	Done   context.Context
}

// Base is the go-plugin Plugin for the BasePlugin service. Impl is only
// needed in a plugin process; a host leaves it nil.
type Base struct {
	plugin.NetRPCUnsupportedPlugin
	Impl basepb.BasePluginServer
}

// GRPCServer registers Impl on the plugin's gRPC server.
func (p *Base) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	basepb.RegisterBasePluginServer(s, p.Impl)
	return nil
}

// GRPCClient returns a *Clients whose Base field is usable.
func (p *Base) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return &Clients{Base: basepb.NewBasePluginClient(c), Done: ctx}, nil
}

// Device is the go-plugin Plugin for the DevicePlugin service.
type Device struct {
	plugin.NetRPCUnsupportedPlugin
	Impl devicepb.DevicePluginServer
}

// GRPCServer registers Impl on the plugin's gRPC server.
func (p *Device) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	devicepb.RegisterDevicePluginServer(s, p.Impl)
	return nil
}

// GRPCClient returns a *Clients with both services usable, as a device
// plugin's client also speaks the base service.
func (p *Device) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return &Clients{
		Base:   basepb.NewBasePluginClient(c),
		Device: devicepb.NewDevicePluginClient(c),
		Done:   ctx,
	}, nil
}
