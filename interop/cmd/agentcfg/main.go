// Command agentcfg decodes a plugin's config from a Nomad agent file the way a
// Nomad v2.0.5 agent does, using the same libraries at the versions the agent
// pins: HCL 1 (Nomad's fork) reads the file into Go maps and lists, the
// plugin's config is written as JSON, HCL 2's JSON syntax reads it back, and
// hcldec decodes it with the spec built from the plugin's ConfigSchema
// message; the result is cty msgpack of the value with its own type.
//
// It is the reference the Python decoder (nomad_device.wire) is checked
// against. Nomad itself is not a dependency: the steps are written here from
// what its sources do.
//
// Input, one JSON object a line:
//
//	{"id": "...", "spec": "<base64 of a hashicorp.nomad.plugins.shared.hclspec.Spec>",
//	 "file": "<agent file text>", "plugin": "<plugin block label>"}
//
// Output, one JSON object a line, in order:
//
//	{"id": "...", "outcome": "accept"|"refuse"|"panic", "stage": "...",
//	 "msgpack": "<hex>", "errors": ["summary: detail", ...], "panic": "..."}
//
// Stages: "file" (HCL 1 could not read the agent file), "keys" (keys the agent
// reports as unexpected), "json" (HCL 2 could not parse the JSON), "schema"
// (the spec could not be built), "decode" (hcldec), "msgpack" (encoding).
package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	hcl1 "github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/hcl/ast"
	hcl "github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	hjson "github.com/hashicorp/hcl/v2/json"
	"github.com/zclconf/go-cty/cty/msgpack"
	"google.golang.org/protobuf/proto"

	"interop/gen/hclspecpb"
)

type request struct {
	ID     string `json:"id"`
	Spec   string `json:"spec"`
	File   string `json:"file"`
	Plugin string `json:"plugin"`
}

type result struct {
	ID      string   `json:"id"`
	Outcome string   `json:"outcome"`
	Stage   string   `json:"stage,omitempty"`
	Msgpack string   `json:"msgpack,omitempty"`
	Errors  []string `json:"errors,omitempty"`
	Panic   string   `json:"panic,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "agentcfg: bad request:", err)
			os.Exit(2)
		}
		res := handle(req)
		res.ID = req.ID
		if err := enc.Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, "agentcfg:", err)
			os.Exit(2)
		}
		// One answer per request, at once: the caller may wait for it.
		if err := out.Flush(); err != nil {
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "agentcfg:", err)
		os.Exit(2)
	}
}

func refuse(stage string, errs ...string) result {
	return result{Outcome: "refuse", Stage: stage, Errors: errs}
}

// guarded runs fn and turns a Go panic into a "panic" result: in the agent
// the same panic ends the process.
func guarded(stage string, fn func() result) (res result) {
	defer func() {
		if r := recover(); r != nil {
			res = result{Outcome: "panic", Stage: stage, Panic: fmt.Sprint(r)}
		}
	}()
	return fn()
}

func handle(req request) result {
	raw, err := base64.StdEncoding.DecodeString(req.Spec)
	if err != nil {
		return refuse("request", err.Error())
	}
	var specMsg hclspecpb.Spec
	if err := proto.Unmarshal(raw, &specMsg); err != nil {
		return refuse("request", err.Error())
	}

	var config map[string]any
	if res := guarded("file", func() result {
		cfg, res := readAgentFile(req.File, req.Plugin)
		config = cfg
		return res
	}); res.Outcome != "" {
		return res
	}

	// The plugin loader starts from an empty map when no config was given.
	if config == nil {
		config = map[string]any{}
	}
	var buf bytes.Buffer
	jenc := json.NewEncoder(&buf)
	jenc.SetEscapeHTML(false)
	if err := jenc.Encode(config); err != nil {
		return refuse("json", "Failed to encode label value: "+err.Error())
	}

	spec, diags := convertSpec(&specMsg)
	if diags.HasErrors() {
		return refuse("schema", messages(diags)...)
	}
	return guarded("decode", func() result {
		file, diags := hjson.Parse(buf.Bytes(), "")
		if diags.HasErrors() {
			return refuse("json", messages(diags)...)
		}
		ctx := &hcl.EvalContext{Functions: stdlibFuncs()}
		val, diags := hcldec.Decode(file.Body, spec, ctx)
		if diags.HasErrors() {
			return refuse("decode", messages(diags)...)
		}
		data, err := msgpack.Marshal(val, val.Type())
		if err != nil {
			return refuse("msgpack", err.Error())
		}
		return result{Outcome: "accept", Msgpack: hex.EncodeToString(data)}
	})
}

// messages renders diagnostics as the agent prints them: "summary: detail",
// with the JSON parser's "Extraneous JSON object property" shown as
// "Invalid label", as Nomad rewrites it.
func messages(diags hcl.Diagnostics) []string {
	var out []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		summary := d.Summary
		if summary == "Extraneous JSON object property" {
			summary = "Invalid label"
		}
		out = append(out, summary+": "+d.Detail)
	}
	return out
}

// The agent's view of a plugin block: a label, args and a free-form config
// map, with the keys HCL 1 did not use collected for the unused-key check.
type pluginBlock struct {
	Name         string         `hcl:",key"`
	Args         []string       `hcl:"args"`
	Config       map[string]any `hcl:"config"`
	ExtraKeysHCL []string       `hcl:",unusedKeys"`
}

// The part of the agent's root config that matters here: its plugin blocks,
// and the root's unused keys (which is where keys from plugin items that HCL 1
// flattened out of a JSON file end up).
type agentRoot struct {
	Plugins      []*pluginBlock `hcl:"plugin"`
	ExtraKeysHCL []string       `hcl:",unusedKeys"`
}

// readAgentFile decodes the file with HCL 1 and returns the config of the last
// block labelled plugin (nil when there is none), or a refusal.
func readAgentFile(text, plugin string) (map[string]any, result) {
	var root agentRoot
	if err := hcl1.Decode(&root, text); err != nil {
		return nil, refuse("file", err.Error())
	}
	// The agent parses the file a second time (for vault and consul blocks).
	file, err := hcl1.Parse(text)
	if err != nil {
		return nil, refuse("file", err.Error())
	}

	extra := append([]string(nil), root.ExtraKeysHCL...)
	// Only keys that come from plugin items are this tool's business: the
	// agent's other settings are not modelled here (a real agent knows them,
	// and refuses the ones it does not).
	if list, ok := file.Node.(*ast.ObjectList); ok {
		for _, item := range list.Items {
			if len(item.Keys) == 0 || strings.EqualFold(keyText(item.Keys[0]), "plugin") {
				continue
			}
			for _, k := range item.Keys {
				removeFold(&extra, keyText(k))
			}
		}
	}
	for _, p := range root.Plugins {
		removeFold(&extra, p.Name)
		removeFold(&extra, "config")
		removeFold(&extra, "plugin")
	}
	// Keys the agent drops whatever the file holds (it decodes them itself, or
	// they are leftovers HCL 1 leaves when reading JSON).
	for range 6 {
		removeFold(&extra, "client")
	}
	for _, k := range []string{"options", "meta", "chroot_env", "servers", "server_join", "template"} {
		removeFold(&extra, k)
	}
	for range 4 {
		removeFold(&extra, "server")
	}
	for _, k := range []string{"enabled_schedulers", "start_join", "retry_join", "server_join"} {
		removeFold(&extra, k)
	}
	removeFold(&extra, "datadog_tags")
	removeFold(&extra, "telemetry")
	for _, k := range []string{"keyring", "license", "vault", "consul"} {
		extra = dropAll(extra, k, k == "keyring")
	}
	for _, k := range []string{"service_identity", "task_identity", "default_identity"} {
		removeFold(&extra, k)
	}
	if len(extra) > 0 {
		return nil, refuse("keys", "unexpected keys "+strings.Join(extra, ", "))
	}

	// Later blocks with the same label replace earlier ones, whole.
	var chosen *pluginBlock
	for _, p := range root.Plugins {
		if p.Name == plugin {
			chosen = p
		}
	}
	if chosen == nil {
		return nil, result{}
	}
	return chosen.Config, result{}
}

func keyText(k *ast.ObjectKey) string {
	if s, ok := k.Token.Value().(string); ok {
		return s
	}
	return k.Token.Text
}

func removeFold(xs *[]string, s string) {
	for i, x := range *xs {
		if strings.EqualFold(x, s) {
			*xs = append((*xs)[:i], (*xs)[i+1:]...)
			return
		}
	}
}

func dropAll(xs []string, s string, fold bool) []string {
	out := xs[:0]
	for _, x := range xs {
		if x == s || (fold && strings.EqualFold(x, s)) {
			continue
		}
		out = append(out, x)
	}
	return out
}
