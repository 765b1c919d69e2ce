package cli

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/policyguard/policyguard/api/gateway"
)

// The functions below make the Parse of a Setting for a kind of value, or
// check one.

// SetString returns a Parse that stores the value in p.
func SetString(p *string) func(string) error {
	return func(v string) error { *p = v; return nil }
}

// SetNonEmpty returns a Parse that sets *p to its value, and refuses an
// empty one with the error message.
func SetNonEmpty(p *string, message string) func(string) error {
	return func(v string) error { *p = v; return Check(v != "", "%s", message) }
}

// SetBool returns a Parse for a Bool setting, which Parse hands "true" or
// "false".
func SetBool(p *bool) func(string) error {
	return func(v string) error { *p = v == "true"; return nil }
}

// SetDuration returns a Parse that stores a duration of at least min in p;
// any other value is an error of msg, with the value for its %q.
func SetDuration(p *time.Duration, min time.Duration, msg string) func(string) error {
	return func(v string) (err error) {
		*p, err = time.ParseDuration(v)
		return Check(err == nil && *p >= min, msg, v)
	}
}

// SetToken returns a Parse that stores a bearer token in p if a client can
// send it back (see CheckToken); name opens the message that says why not.
func SetToken(p *string, name string) func(string) error {
	return func(v string) error {
		*p = v
		if err := CheckToken(v); err != nil {
			return fmt.Errorf("%s %w", name, err)
		}
		return nil
	}
}

// SetInt returns a Parse that stores a whole number of at least min in p;
// any other value is an error of msg, with the value for its %q.
func SetInt(p *int, min int, msg string) func(string) error {
	return func(v string) (err error) {
		*p, err = strconv.Atoi(v)
		return Check(err == nil && *p >= min, msg, v)
	}
}

// SetInt64 is SetInt for an int64 from min to max.
func SetInt64(p *int64, min, max int64, msg string) func(string) error {
	return func(v string) (err error) {
		*p, err = strconv.ParseInt(v, 10, 64)
		return Check(err == nil && *p >= min && *p <= max, msg, v)
	}
}

// Check returns nil if ok, and otherwise the error that format and args
// describe.
func Check(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

// CheckToken refuses a token no client could send back: a bearer token is
// read from its header with the surrounding spaces removed, and a header
// cannot carry control characters. A token pasted with a trailing space or
// newline would otherwise never match, and nothing would say why.
func CheckToken(tok string) error {
	if strings.TrimSpace(tok) != tok {
		return errors.New("starts or ends with white space")
	}
	for _, r := range tok {
		if r < 0x20 || r == 0x7f {
			return errors.New("contains a control character")
		}
	}
	return nil
}

// ParseProxies reads a comma-separated list of addresses and CIDR ranges.
func ParseProxies(list string) ([]*net.IPNet, error) {
	var nets []*net.IPNet
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			ip := net.ParseIP(item)
			if ip == nil {
				return nil, fmt.Errorf("trusted proxy %q: not an IP address or CIDR range", item)
			}
			bits := 128
			if ip4 := ip.To4(); ip4 != nil {
				ip, bits = ip4, 32
			}
			nets = append(nets, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			continue
		}
		_, n, err := net.ParseCIDR(item)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: not an IP address or CIDR range", item)
		}
		nets = append(nets, n)
	}
	return nets, nil
}

// AppendList returns a Parse that appends to p the comma-separated items
// of a value, each trimmed of white space; empty ones are skipped.
func AppendList(p *[]string) func(string) error {
	return func(v string) error {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				*p = append(*p, item)
			}
		}
		return nil
	}
}

// AppendPassthrough returns a Parse that appends to p the passthrough
// prefixes of a value, as AppendList does. The setting was a boolean before
// it became a list of prefixes: "false", the old default, still forwards
// nothing, so an environment file written for it keeps working, and "true",
// which forwarded every path, is refused with what to write instead.
func AppendPassthrough(p *[]string) func(string) error {
	appendList := AppendList(p)
	return func(v string) error {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "false", "0":
			return nil
		case "true", "1":
			return fmt.Errorf("passthrough %q: name the path prefixes to forward, such as /files,/models; forwarding every path is no longer possible, since some reach model calls the gateway cannot meter", v)
		}
		return appendList(v)
	}
}

// AddUpstream adds the upstream that spec names (NAME=PROTOCOL:URL) to gw,
// with its key from the environment.
func AddUpstream(gw *gateway.Config, spec string, getenv func(string) string) error {
	up, err := gateway.ParseUpstream(spec)
	if err != nil {
		return err
	}
	for _, other := range gw.Upstreams {
		if other.Name == up.Name {
			return fmt.Errorf("upstream %s is named twice", up.Name)
		}
	}
	variable := UpstreamKeyVariable(up.Name)
	if up.Key = getenv(variable); up.Key == "" {
		return fmt.Errorf("upstream %s has no key: set %s", up.Name, variable)
	}
	if err := CheckToken(up.Key); err != nil {
		return fmt.Errorf("the key in %s %w", variable, err)
	}
	gw.Upstreams = append(gw.Upstreams, up)
	return nil
}

// UpstreamKeyVariable returns the environment variable that holds the key
// of the upstream named name: GUARDRAIL_UPSTREAM_KEY_ and the name in
// upper case, with "-" as "_". A key is read from the environment only,
// never from a flag, which a process listing and a usage message show.
func UpstreamKeyVariable(name string) string {
	return "GUARDRAIL_UPSTREAM_KEY_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// CheckTestClockAddr refuses a listen address that is not loopback
// (127.0.0.0/8, ::1 or localhost): a service whose clock anyone with the
// admin token can move must not be mistaken for, or reachable as, a real
// one. An address without a host (":8080") listens on every interface and
// is refused.
func CheckTestClockAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-test-clock: listen address %q: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-test-clock: listen address %q is not loopback: a test clock listens only on 127.0.0.1, ::1 or localhost", addr)
}
