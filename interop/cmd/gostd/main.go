// gostd answers what Go's own functions give, for the SDK's ports of them
// (nomad_device.golang, and the Go rules placement follows): one JSON request a
// line on stdin, one answer a line on stdout, base64-encoded so that every byte
// Go produced is compared (tests/golang/test_go_crosscheck.py).
//
// Requests: {"op": "...", "s": "...", "b": <bytes>, ...}; see answer() for the
// fields each op reads. An op that depends on the process (time.Local,
// os.Getwd) reads the environment the test starts this program with.
package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	version "github.com/hashicorp/go-version"
	"golang.org/x/net/http/httpproxy"
)

type side struct {
	I   *int64   `json:"i"`
	F   *float64 `json:"f"`
	M   int64    `json:"m"`
	Inv bool     `json:"inv"`
}

type request struct {
	Op    string            `json:"op"`
	S     string            `json:"s"`
	T     string            `json:"t"`
	B     []byte            `json:"b"`
	N     int64             `json:"n"`
	Base  int               `json:"base"`
	Sec   int64             `json:"sec"`
	Nsec  int64             `json:"nsec"`
	Zone  string            `json:"zone"`  // IANA name, "Local", or "" for a nameless fixed zone
	Fixed int               `json:"fixed"` // seconds east of UTC when Zone is ""
	Parts []string          `json:"parts"`
	Env   map[string]string `json:"env"`
	A     side              `json:"a"`
	C     side              `json:"c"`
}

// big256 is a value as Nomad's Attribute.getBigFloat builds it: 256 bits, times its unit.
func big256(s side) *big.Float {
	f := new(big.Float).SetPrec(256)
	if s.I != nil {
		f.SetInt64(*s.I)
	} else {
		f.SetFloat64(*s.F)
	}
	if s.M == 0 {
		return f
	}
	m := new(big.Float).SetPrec(256).SetInt64(s.M)
	if s.Inv {
		one := big.NewFloat(1.0).SetPrec(256)
		m = m.Quo(one, m)
	}
	return f.Mul(f, m)
}

func describe(fi os.FileInfo) string {
	return fi.Mode().String() + "\t" + fi.Mode().Perm().String() + "\t" + fi.ModTime().String()
}

func anyEnv(env map[string]string, names ...string) string {
	for _, n := range names {
		if v := env[n]; v != "" {
			return v
		}
	}
	return ""
}

func answer(r request) (string, error) {
	switch r.Op {
	case "duration":
		d, err := time.ParseDuration(string(r.B))
		if err != nil {
			return "E" + err.Error(), nil
		}
		return "V" + strconv.FormatInt(int64(d), 10), nil
	case "format":
		return time.Duration(r.N).String(), nil
	case "quote":
		return strconv.Quote(string(r.B)), nil
	case "json":
		out, err := json.Marshal(string(r.B))
		return string(out), err
	case "stat":
		li, err := os.Lstat(r.S)
		if err != nil {
			return "", err
		}
		si, err := os.Stat(r.S)
		if err != nil {
			return "", err
		}
		return describe(li) + "\n" + describe(si), nil
	case "time":
		var loc *time.Location
		switch r.Zone {
		case "":
			loc = time.FixedZone("", r.Fixed)
		case "Local":
			loc = time.Local
		default:
			var err error
			if loc, err = time.LoadLocation(r.Zone); err != nil {
				return "", err
			}
		}
		return time.Unix(r.Sec, r.Nsec).In(loc).String(), nil
	case "join":
		return filepath.Join(r.Parts...), nil
	case "abs":
		return filepath.Abs(r.S)
	case "int":
		v, err := strconv.ParseInt(r.S, r.Base, 64)
		if err != nil {
			return err.Error(), nil
		}
		return strconv.FormatInt(v, 10), nil
	case "float":
		v, err := strconv.ParseFloat(r.S, 64)
		if err != nil {
			return err.Error(), nil
		}
		if math.IsNaN(v) {
			return "NaN", nil
		}
		return fmt.Sprintf("%016x", math.Float64bits(v)), nil
	case "bool":
		v, err := strconv.ParseBool(r.S)
		if err != nil {
			return err.Error(), nil
		}
		return strconv.FormatBool(v), nil
	case "big":
		return strconv.Itoa(big256(r.A).Cmp(big256(r.C))), nil
	case "regexp":
		re, err := regexp.Compile(r.S)
		if err != nil {
			return "ERR", nil
		}
		return strconv.FormatBool(re.MatchString(r.T)), nil
	case "version":
		v, err := version.NewVersion(r.S)
		if err != nil {
			return "ERRV", nil
		}
		c, err := version.NewConstraint(r.T)
		if err != nil {
			return "ERRC", nil
		}
		return strconv.FormatBool(c.Check(v)), nil
	case "vcmp":
		a, err := version.NewVersion(r.S)
		if err != nil {
			return "ERRV", nil
		}
		b, err := version.NewVersion(r.T)
		if err != nil {
			return "ERRV", nil
		}
		return strconv.Itoa(a.Compare(b)), nil
	case "semverparse":
		if _, err := version.NewSemver(r.S); err != nil {
			return "ERR", nil
		}
		return "ok", nil
	case "proxy":
		// net/http.ProxyFromEnvironment is httpproxy.FromEnvironment, read once per
		// process; the same Config built from the request's environment.
		cfg := httpproxy.Config{
			HTTPProxy:  anyEnv(r.Env, "HTTP_PROXY", "http_proxy"),
			HTTPSProxy: anyEnv(r.Env, "HTTPS_PROXY", "https_proxy"),
			NoProxy:    anyEnv(r.Env, "NO_PROXY", "no_proxy"),
			CGI:        r.Env["REQUEST_METHOD"] != "",
		}
		u, err := url.Parse(r.S)
		if err != nil {
			return "", err
		}
		proxy, err := cfg.ProxyFunc()(u)
		if err != nil {
			return "ERR", nil
		}
		if proxy == nil {
			return "", nil
		}
		return proxy.String(), nil
	}
	return "", fmt.Errorf("unknown op %q", r.Op)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			fmt.Fprintln(os.Stderr, "bad request:", err)
			os.Exit(2)
		}
		got, err := answer(r)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", r.Op, err)
			os.Exit(2)
		}
		fmt.Fprintln(out, base64.StdEncoding.EncodeToString([]byte(got)))
	}
}
