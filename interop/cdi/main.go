// Command cdicheck loads CDI spec directories with the reference library,
// tags.cncf.io/container-device-interface, and prints what its cache makes of
// them: the specs it loaded and the errors it recorded per file, and for every
// qualified device name the edits the cache resolves (the spec's
// containerEdits followed by the device's, joined by the library's own
// ContainerEdits.Append) and what InjectDevices does to an empty OCI spec with
// that device alone and with the combinations asked for.
//
// It is the reference nomad-device-generic's CDI reader
// (src/nomad_device/plugins/generic/cdi.py) is checked against.
//
// Input, one JSON object a line:
//
//	{"id": "...", "dirs": ["/etc/cdi", ...], "combos": [["vendor.com/class=a", "..."], ...]}
//
// Output, one JSON object a line, in order:
//
//	{"id": "...", "loaded": [paths], "errors": {path: [messages]},
//	 "panics": {path: message}, "devices": {qualified: {"edits": E, "inject": R}},
//	 "combos": [R, ...]}
//
// A spec file that makes the library panic (a null entry in a list of device
// nodes or mounts is dereferenced while the spec version is checked) would end
// any program that reads it; such files are reported under "panics" and the
// cache is built from the others, through a mirror of the directories made of
// symlinks (so names and order stay as they were). Paths are reported as the
// request named them.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

type request struct {
	ID     string     `json:"id"`
	Dirs   []string   `json:"dirs"`
	Combos [][]string `json:"combos"`
}

type deviceOut struct {
	Edits  map[string]any `json:"edits"`
	Inject map[string]any `json:"inject"`
}

type result struct {
	ID      string               `json:"id"`
	Loaded  []string             `json:"loaded"`
	Errors  map[string][]string  `json:"errors"`
	Panics  map[string]string    `json:"panics"`
	Devices map[string]deviceOut `json:"devices"`
	Combos  []map[string]any     `json:"combos"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<30)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "cdicheck: bad request:", err)
			os.Exit(2)
		}
		if err := out.Encode(handle(req)); err != nil {
			fmt.Fprintln(os.Stderr, "cdicheck:", err)
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "cdicheck:", err)
		os.Exit(2)
	}
}

// readSafely reads one spec as the cache would, turning a panic into a message.
func readSafely(path string, priority int) (message string) {
	defer func() {
		if r := recover(); r != nil {
			message = fmt.Sprint(r)
		}
	}()
	_, _ = cdi.ReadSpec(path, priority)
	return ""
}

// specFiles lists what the cache would try to read in dir, as it lists it.
func specFiles(dir string) ([]fs.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []fs.DirEntry
	for _, entry := range entries {
		if entry.IsDir() {
			continue
		}
		if ext := filepath.Ext(entry.Name()); ext != ".json" && ext != ".yaml" {
			continue
		}
		out = append(out, entry)
	}
	return out, nil
}

func handle(req request) result {
	res := result{
		ID:      req.ID,
		Loaded:  []string{},
		Errors:  map[string][]string{},
		Panics:  map[string]string{},
		Devices: map[string]deviceOut{},
		Combos:  []map[string]any{},
	}
	for priority, dir := range req.Dirs {
		entries, err := specFiles(dir)
		if err != nil {
			continue
		}
		for _, entry := range entries {
			path := filepath.Join(filepath.Clean(dir), entry.Name())
			if message := readSafely(path, priority); message != "" {
				res.Panics[path] = message
			}
		}
	}
	dirs, back := req.Dirs, func(path string) string { return path }
	if len(res.Panics) > 0 {
		mirror, err := os.MkdirTemp("", "cdicheck-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(mirror)
		dirs, back = mirrorDirs(req.Dirs, mirror, res.Panics)
	}
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	for path, errs := range cache.GetErrors() {
		for _, err := range errs {
			res.Errors[back(path)] = append(res.Errors[back(path)], err.Error())
		}
	}
	for _, vendor := range cache.ListVendors() {
		for _, spec := range cache.GetVendorSpecs(vendor) {
			res.Loaded = append(res.Loaded, back(spec.GetPath()))
		}
	}
	sort.Strings(res.Loaded)
	for _, name := range cache.ListDevices() {
		device := cache.GetDevice(name)
		spec := device.GetSpec()
		edits := (&cdi.ContainerEdits{ContainerEdits: &cdispec.ContainerEdits{}}).
			Append(&cdi.ContainerEdits{ContainerEdits: &spec.ContainerEdits}).
			Append(&cdi.ContainerEdits{ContainerEdits: &device.ContainerEdits})
		res.Devices[name] = deviceOut{
			Edits:  editsJSON(edits.ContainerEdits),
			Inject: inject(cache, []string{name}),
		}
	}
	for _, combo := range req.Combos {
		res.Combos = append(res.Combos, inject(cache, combo))
	}
	return res
}

// mirrorDirs makes, under mirror, one directory per spec directory holding a
// symlink to each file the cache would read except those that panic.
func mirrorDirs(dirs []string, mirror string, panics map[string]string) ([]string, func(string) string) {
	mirrored := make([]string, len(dirs))
	origin := map[string]string{}
	for i, dir := range dirs {
		mirrored[i] = filepath.Join(mirror, fmt.Sprint(i))
		entries, err := specFiles(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil { // the cache stops here: make it stop at the mirror too
			if err := os.WriteFile(mirrored[i], nil, 0o644); err != nil {
				panic(err)
			}
			continue
		}
		if err := os.Mkdir(mirrored[i], 0o755); err != nil {
			panic(err)
		}
		for _, entry := range entries {
			path := filepath.Join(filepath.Clean(dir), entry.Name())
			if _, bad := panics[path]; bad {
				continue
			}
			link := filepath.Join(mirrored[i], entry.Name())
			if err := os.Symlink(path, link); err != nil {
				panic(err)
			}
			origin[link] = path
		}
	}
	return mirrored, func(path string) string {
		if o, ok := origin[path]; ok {
			return o
		}
		return path
	}
}

func inject(cache *cdi.Cache, names []string) map[string]any {
	spec := &oci.Spec{Process: &oci.Process{}}
	if _, err := cache.InjectDevices(spec, names...); err != nil {
		return map[string]any{"error": err.Error()}
	}
	return ociJSON(spec)
}

func strs(in []string) []string {
	if in == nil {
		return []string{}
	}
	return in
}

func editsJSON(e *cdispec.ContainerEdits) map[string]any {
	nodes := []any{}
	for _, n := range e.DeviceNodes {
		var mode any
		if n.FileMode != nil {
			mode = uint32(*n.FileMode)
		}
		var uid, gid any
		if n.UID != nil {
			uid = *n.UID
		}
		if n.GID != nil {
			gid = *n.GID
		}
		nodes = append(nodes, map[string]any{
			"path": n.Path, "hostPath": n.HostPath, "type": n.Type, "major": n.Major,
			"minor": n.Minor, "fileMode": mode, "permissions": n.Permissions, "uid": uid, "gid": gid,
		})
	}
	nets := []any{}
	for _, d := range e.NetDevices {
		nets = append(nets, map[string]any{"hostInterfaceName": d.HostInterfaceName, "name": d.Name})
	}
	hooks := []any{}
	for _, h := range e.Hooks {
		var timeout any
		if h.Timeout != nil {
			timeout = *h.Timeout
		}
		hooks = append(hooks, map[string]any{
			"hookName": h.HookName, "path": h.Path, "args": strs(h.Args), "env": strs(h.Env),
			"timeout": timeout,
		})
	}
	mounts := []any{}
	for _, m := range e.Mounts {
		mounts = append(mounts, map[string]any{
			"hostPath": m.HostPath, "containerPath": m.ContainerPath, "options": strs(m.Options),
			"type": m.Type,
		})
	}
	var rdt any
	if r := e.IntelRdt; r != nil {
		var schemata any
		if r.Schemata != nil {
			schemata = r.Schemata
		}
		rdt = map[string]any{
			"closID": r.ClosID, "l3CacheSchema": r.L3CacheSchema, "memBwSchema": r.MemBwSchema,
			"schemata": schemata, "enableMonitoring": r.EnableMonitoring,
		}
	}
	gids := []uint32{}
	gids = append(gids, e.AdditionalGIDs...)
	return map[string]any{
		"env": strs(e.Env), "deviceNodes": nodes, "netDevices": nets, "hooks": hooks,
		"mounts": mounts, "intelRdt": rdt, "additionalGids": gids,
	}
}

func ociJSON(s *oci.Spec) map[string]any {
	env := []string{}
	gids := []uint32{}
	if s.Process != nil {
		env = strs(s.Process.Env)
		gids = append(gids, s.Process.User.AdditionalGids...)
	}
	devices, cgroups := []any{}, []any{}
	nets := map[string]string{}
	var rdt any
	if s.Linux != nil {
		for _, d := range s.Linux.Devices {
			var mode any
			if d.FileMode != nil {
				mode = uint32(*d.FileMode)
			}
			devices = append(devices, map[string]any{
				"path": d.Path, "type": d.Type, "major": d.Major, "minor": d.Minor, "fileMode": mode,
			})
		}
		if s.Linux.Resources != nil {
			for _, c := range s.Linux.Resources.Devices {
				cgroups = append(cgroups, map[string]any{
					"allow": c.Allow, "type": c.Type, "major": *c.Major, "minor": *c.Minor,
					"access": c.Access,
				})
			}
		}
		for host, d := range s.Linux.NetDevices {
			nets[host] = d.Name
		}
		if r := s.Linux.IntelRdt; r != nil {
			var schemata any
			if r.Schemata != nil {
				schemata = r.Schemata
			}
			rdt = map[string]any{
				"closID": r.ClosID, "l3CacheSchema": r.L3CacheSchema, "memBwSchema": r.MemBwSchema,
				"schemata": schemata, "enableMonitoring": r.EnableMonitoring,
			}
		}
	}
	mounts := []any{}
	for _, m := range s.Mounts {
		mounts = append(mounts, map[string]any{
			"destination": m.Destination, "source": m.Source, "type": m.Type, "options": strs(m.Options),
		})
	}
	hooks := map[string]any{}
	if h := s.Hooks; h != nil {
		for name, list := range map[string][]oci.Hook{
			"prestart": h.Prestart, "createRuntime": h.CreateRuntime, //nolint:staticcheck
			"createContainer": h.CreateContainer, "startContainer": h.StartContainer,
			"poststart": h.Poststart, "poststop": h.Poststop,
		} {
			if len(list) == 0 {
				continue
			}
			items := []any{}
			for _, hook := range list {
				var timeout any
				if hook.Timeout != nil {
					timeout = *hook.Timeout
				}
				items = append(items, map[string]any{
					"path": hook.Path, "args": strs(hook.Args), "env": strs(hook.Env), "timeout": timeout,
				})
			}
			hooks[name] = items
		}
	}
	return map[string]any{
		"env": env, "devices": devices, "cgroups": cgroups, "mounts": mounts, "hooks": hooks,
		"intelRdt": rdt, "additionalGids": gids, "netDevices": nets,
	}
}
