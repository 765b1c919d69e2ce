package api

import (
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/labstack/echo/v4"

	"github.com/policyguard/policyguard/policy"
)

// tierJSON is a tier on the wire: the answers and bodies of /v1/tiers,
// each entry of a tiers file, and the before and after of a change on the
// admin page. Its members are the name, then a member per limit of
// policy.LimitFields in the table's order (a required limit a number, an
// optional one null for none: see writeLimits), then the rest.
// UpdatedAt is left out when zero: a tiers file and a change leave it
// zero, so that a file kept in a repository changes only when a tier
// does; a body may carry it, so that an answer can be sent back as is,
// and the server then sets the time of the change.
type tierJSON struct {
	Name        string
	Limits      policy.LimitSet
	Features    []string // nil is written []
	Models      []string // null (or absent from a body) for any model
	Description string
	UpdatedAt   time.Time
	// Shadow is left out when the tier has none, so that a tiers file
	// without shadow limits reads as before; a body may send it null.
	Shadow *limitsJSON
	// Account is the pooled limits of an account on the tier, left out
	// when it has none; each limit null (or absent) for none.
	Account *poolJSON
	// Run is the tier's run object, left out when it has none (a body may
	// send it null).
	Run *runJSON
}

// runJSON is a tier's run object: every limit of a run, each optional,
// and whether every gateway request under the tier must name a run.
type runJSON struct {
	Limits   policy.LimitSet
	Required bool
}

// poolJSON is the pooled limits of an account on a tier: every limit of a
// tier, each optional.
type poolJSON struct{ Limits policy.LimitSet }

// limitsJSON is the request limits of a tier's shadow: all four required,
// and the pooled shadow limits of its accounts, left out when it has none
// (a body may send it null).
type limitsJSON struct {
	Limits  policy.LimitSet
	Account *shadowPoolJSON
}

// shadowPoolJSON is the pooled shadow limits of a tier's accounts: the
// request limits of poolJSON, each optional.
type shadowPoolJSON struct{ Limits policy.LimitSet }

// MarshalJSONTo implements json.MarshalerTo.
func (j tierJSON) MarshalJSONTo(enc *jsontext.Encoder) error {
	if err := enc.WriteToken(jsontext.BeginObject); err != nil {
		return err
	}
	err := writeMember(enc, "name", j.Name)
	if err == nil {
		err = writeLimits(enc, &j.Limits, inScope(policy.ScopeTier), false)
	}
	if err == nil {
		err = writeMember(enc, "features", j.Features)
	}
	if err == nil {
		err = writeMember(enc, "models", j.Models, json.FormatNilSliceAsNull(true))
	}
	if err == nil {
		err = writeMember(enc, "description", j.Description)
	}
	if err == nil && !j.UpdatedAt.IsZero() {
		err = writeMember(enc, "updated_at", j.UpdatedAt)
	}
	if err == nil && j.Shadow != nil {
		err = writeMember(enc, "shadow", j.Shadow)
	}
	if err == nil && j.Account != nil {
		err = writeMember(enc, "account", j.Account)
	}
	if err == nil && j.Run != nil {
		err = writeMember(enc, "run", j.Run)
	}
	if err != nil {
		return err
	}
	return enc.WriteToken(jsontext.EndObject)
}

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (j *tierJSON) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*j = tierJSON{}
	return readObject(dec, reflect.TypeFor[tierJSON](), func(name string) (bool, error) {
		switch name {
		case "name":
			return true, json.UnmarshalDecode(dec, &j.Name)
		case "features":
			return true, json.UnmarshalDecode(dec, &j.Features)
		case "models":
			return true, json.UnmarshalDecode(dec, &j.Models)
		case "description":
			return true, json.UnmarshalDecode(dec, &j.Description)
		case "updated_at":
			return true, json.UnmarshalDecode(dec, &j.UpdatedAt)
		case "shadow":
			return true, json.UnmarshalDecode(dec, &j.Shadow)
		case "account":
			return true, json.UnmarshalDecode(dec, &j.Account)
		case "run":
			return true, json.UnmarshalDecode(dec, &j.Run)
		}
		return readLimit(dec, &j.Limits, name, inScope(policy.ScopeTier), false)
	})
}

// MarshalJSONTo implements json.MarshalerTo.
func (p poolJSON) MarshalJSONTo(enc *jsontext.Encoder) error {
	return writeLimitsObject(enc, &p.Limits, inScope(policy.ScopeAccount))
}

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (p *poolJSON) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*p = poolJSON{}
	return readObject(dec, reflect.TypeFor[poolJSON](), func(name string) (bool, error) {
		return readLimit(dec, &p.Limits, name, inScope(policy.ScopeAccount), true)
	})
}

// MarshalJSONTo implements json.MarshalerTo.
func (r runJSON) MarshalJSONTo(enc *jsontext.Encoder) error {
	if err := enc.WriteToken(jsontext.BeginObject); err != nil {
		return err
	}
	err := writeLimits(enc, &r.Limits, inScope(policy.ScopeRun), true)
	if err == nil {
		err = writeMember(enc, "required", r.Required)
	}
	if err != nil {
		return err
	}
	return enc.WriteToken(jsontext.EndObject)
}

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (r *runJSON) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*r = runJSON{}
	return readObject(dec, reflect.TypeFor[runJSON](), func(name string) (bool, error) {
		if name == "required" {
			return true, json.UnmarshalDecode(dec, &r.Required)
		}
		return readLimit(dec, &r.Limits, name, inScope(policy.ScopeRun), true)
	})
}

// MarshalJSONTo implements json.MarshalerTo.
func (p shadowPoolJSON) MarshalJSONTo(enc *jsontext.Encoder) error {
	return writeLimitsObject(enc, &p.Limits, (*policy.LimitField).InRequestLimits)
}

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (p *shadowPoolJSON) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*p = shadowPoolJSON{}
	return readObject(dec, reflect.TypeFor[shadowPoolJSON](), func(name string) (bool, error) {
		return readLimit(dec, &p.Limits, name, (*policy.LimitField).InRequestLimits, true)
	})
}

// MarshalJSONTo implements json.MarshalerTo.
func (l limitsJSON) MarshalJSONTo(enc *jsontext.Encoder) error {
	if err := enc.WriteToken(jsontext.BeginObject); err != nil {
		return err
	}
	err := writeLimits(enc, &l.Limits, (*policy.LimitField).InRequestLimits, false)
	if err == nil && l.Account != nil {
		err = writeMember(enc, "account", l.Account)
	}
	if err != nil {
		return err
	}
	return enc.WriteToken(jsontext.EndObject)
}

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (l *limitsJSON) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	*l = limitsJSON{}
	return readObject(dec, reflect.TypeFor[limitsJSON](), func(name string) (bool, error) {
		if name == "account" {
			return true, json.UnmarshalDecode(dec, &l.Account)
		}
		return readLimit(dec, &l.Limits, name, (*policy.LimitField).InRequestLimits, false)
	})
}

// inScope returns the want of writeLimits and readLimit for the limits of
// scope sc.
func inScope(sc policy.Scope) func(*policy.LimitField) bool {
	return func(f *policy.LimitField) bool { return f.In(sc) }
}

// writeMember writes the member name with value v.
func writeMember(enc *jsontext.Encoder, name string, v any, opts ...json.Options) error {
	if err := enc.WriteToken(jsontext.String(name)); err != nil {
		return err
	}
	return json.MarshalEncode(enc, v, opts...)
}

// writeLimits writes the limits of s that want reports (nil: every one)
// as members named as their rows of policy.LimitFields, in its order, each
// value as limitToken writes it: a required limit, unless pooled, 0 when
// unset; any other null for none.
func writeLimits(enc *jsontext.Encoder, s *policy.LimitSet, want func(*policy.LimitField) bool, pooled bool) error {
	for i := range policy.LimitFields {
		f := &policy.LimitFields[i]
		if want != nil && !want(f) {
			continue
		}
		tok := jsontext.Null
		switch v := s[i]; {
		case v != nil:
			tok = limitToken(f, *v)
		case !f.Optional && !pooled:
			tok = limitToken(f, 0)
		}
		if err := enc.WriteToken(jsontext.String(f.Name)); err != nil {
			return err
		}
		if err := enc.WriteToken(tok); err != nil {
			return err
		}
	}
	return nil
}

// writeLimitsObject writes the pooled limits of s that want reports (see
// writeLimits) as an object.
func writeLimitsObject(enc *jsontext.Encoder, s *policy.LimitSet, want func(*policy.LimitField) bool) error {
	if err := enc.WriteToken(jsontext.BeginObject); err != nil {
		return err
	}
	if err := writeLimits(enc, s, want, true); err != nil {
		return err
	}
	return enc.WriteToken(jsontext.EndObject)
}

// readLimit reads the value of the member name into s when name is a limit
// of policy.LimitFields that want reports (nil: every one); ok is false
// when it is not. A required limit, unless pooled, is read as an int64, so
// that null reaches the caller's unmarshaler for one (see decodeTier); a
// spend limit as a spendJSON, a decimal string of dollars; any other as a
// *int64, null for none.
func readLimit(dec *jsontext.Decoder, s *policy.LimitSet, name string, want func(*policy.LimitField) bool, pooled bool) (ok bool, err error) {
	f, ok := policy.LimitFieldNamed(name)
	if !ok || want != nil && !want(f) {
		return false, nil
	}
	if f.Kind == policy.KindCost {
		var p *spendJSON
		err = json.UnmarshalDecode(dec, &p)
		s[f.ID()] = nil
		if p != nil {
			s[f.ID()] = p.v
		}
		return true, err
	}
	if f.Optional || pooled {
		var p *int64
		err = json.UnmarshalDecode(dec, &p)
		s[f.ID()] = p
		return true, err
	}
	var v int64
	err = json.UnmarshalDecode(dec, &v)
	s[f.ID()] = &v
	return true, err
}

// readObject reads a JSON object from dec, calling member with the name of
// each member to read its value; member reports false for a name it does
// not know, which is an unknown member under json.RejectUnknownMembers and
// skipped otherwise. A value that is not an object is a *json.SemanticError
// naming goType, as the library reports one.
func readObject(dec *jsontext.Decoder, goType reflect.Type, member func(name string) (bool, error)) error {
	if k := dec.PeekKind(); k != '{' {
		err := &json.SemanticError{JSONKind: k, GoType: goType}
		if _, skipErr := dec.ReadValue(); skipErr != nil {
			return skipErr
		}
		return err
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	reject, _ := json.GetOption(dec.Options(), json.RejectUnknownMembers)
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		name := tok.String()
		switch ok, err := member(name); {
		case err != nil:
			return err
		case ok:
		case reject:
			return &json.SemanticError{JSONKind: '"', JSONPointer: dec.StackPointer(), GoType: goType, Err: json.ErrUnknownName}
		default:
			if err := dec.SkipValue(); err != nil {
				return err
			}
		}
	}
	_, err := dec.ReadToken()
	return err
}

func tierToJSON(t policy.Tier) tierJSON {
	j := tierJSON{Name: t.Name, Features: t.Features, Models: t.Models, Description: t.Description, UpdatedAt: t.UpdatedAt.UTC()}
	for f := range policy.FieldsIn(policy.ScopeTier) {
		j.Limits[f.ID()] = f.Get(&t)
	}
	if l := t.Shadow; l != nil {
		j.Shadow = &limitsJSON{Limits: l.Limits}
		if l.Account != nil {
			j.Shadow.Account = &shadowPoolJSON{Limits: *l.Account}
		}
	}
	if p := t.Account; p != nil {
		j.Account = &poolJSON{Limits: *p}
	}
	if t.Run != nil || t.RunRequired {
		j.Run = &runJSON{Required: t.RunRequired}
		if t.Run != nil {
			j.Run.Limits = *t.Run
		}
	}
	return j
}

// tierFields are a tier's fields in the order their problems are listed.
var tierFields = func() []string {
	fields := append([]string{"name"}, policy.LimitNames[:]...)
	fields = append(fields, "features", "models", "description", "shadow")
	for i := range policy.LimitFields {
		if f := &policy.LimitFields[i]; f.InRequestLimits() {
			fields = append(fields, "shadow."+f.Name)
		}
	}
	fields = append(fields, "shadow.account")
	for i := range policy.LimitFields {
		if f := &policy.LimitFields[i]; f.InRequestLimits() {
			fields = append(fields, "shadow.account."+f.Name)
		}
	}
	fields = append(fields, "account")
	for f := range policy.FieldsIn(policy.ScopeAccount) {
		fields = append(fields, "account."+f.Name)
	}
	fields = append(fields, "run")
	for f := range policy.FieldsIn(policy.ScopeRun) {
		fields = append(fields, "run."+f.Name)
	}
	return append(fields, "run.required")
}()

// decodeTier reads data into a tierJSON, noting in present each field it
// holds and in problems each value of the wrong type (see readTier); err
// is a body that is not JSON, or names an unknown field.
func decodeTier(data []byte, problems map[string][]string, present map[string]bool) (in tierJSON, err error) {
	// must reads a value of type T, or notes that its field must be one.
	must := func(want string) func(*jsontext.Decoder, any) error {
		return func(dec *jsontext.Decoder, v any) error {
			// The field's path, "shadow.account.requests_per_minute"
			// in nested objects.
			field := strings.Join(slices.Collect(dec.StackPointer().Tokens()), ".")
			val, err := dec.ReadValue()
			if err != nil {
				return err
			}
			present[field] = true
			if json.Unmarshal(val, v) != nil {
				problems[field] = append(problems[field], field+" must be "+want)
			}
			return nil
		}
	}
	limit, str := must(fmt.Sprintf("an integer from 0 to %d", policy.MaxLimit)), must("a string")
	strs, boolean := must("an array of strings"), must("true or false")
	err = unmarshalObject(data, &in, json.JoinOptions(strictOptions, json.WithUnmarshalers(json.JoinUnmarshalers(
		// A required limit has no null: null would read as 0, a tier that
		// admits nothing, where the sender may have meant no limit. (An
		// optional limit is a *int64, which null leaves nil without
		// coming here.)
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *int64) error {
			if dec.PeekKind() == 'n' {
				field := strings.Join(slices.Collect(dec.StackPointer().Tokens()), ".")
				present[field] = true
				problems[field] = append(problems[field], policy.NullRequiredLimit(field))
				return dec.SkipValue()
			}
			return limit(dec, v)
		}),
		// A spend limit's problem is noted as the others' are.
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *spendJSON) error {
			field := fieldPath(dec)
			present[field] = true
			if err := v.UnmarshalJSONFrom(dec); err != nil {
				if policy.ErrorCode(err) != policy.EINVALID {
					return err
				}
				problems[field] = append(problems[field], policy.ErrorMessage(err))
			}
			return nil
		}),
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *string) error { return str(dec, v) }),
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *[]string) error { return strs(dec, v) }),
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *bool) error { return boolean(dec, v) }),
	))))
	return in, err
}

// readTier reads data, the body of PUT /v1/tiers/{name} (pathName is then
// the name from the path) or one entry of a tiers file (pathName "", and
// the entry must hold a name), and returns the tier with every problem it
// has, in field order. A value of the wrong type is a problem of its field
// and reading goes on, so that a tiers file's report lists them all; a
// body that is not JSON, or names an unknown field, is one problem. The
// tier carries the name whenever there is one, to say which entry is wrong.
func readTier(data []byte, pathName string) (policy.Tier, []string) {
	problems := make(map[string][]string)
	present := make(map[string]bool)
	in, err := decodeTier(data, problems, present)
	name := pathName
	if name == "" {
		name = in.Name
	}
	if err != nil {
		if name == "" { // the name leniently, to say which entry is wrong
			var named struct{ Name string }
			_ = json.Unmarshal(data, &named)
			name = named.Name
		}
		return policy.Tier{Name: name}, []string{policy.ErrorMessage(err)}
	}
	switch {
	case pathName == "" && !present["name"]:
		return policy.Tier{}, []string{"name is required"}
	case pathName == "" && problems["name"] != nil:
		return policy.Tier{}, problems["name"]
	case pathName != "" && present["name"] && problems["name"] == nil && in.Name != pathName:
		problems["name"] = []string{fmt.Sprintf("name %s in the body does not match %s in the path", policy.Quote(in.Name), policy.Quote(pathName))}
	}
	if !policy.ValidTierName(name) {
		problems["name"] = append([]string{"tier name must match [a-z0-9][a-z0-9_-]{0,62}"}, problems["name"]...)
	}
	t := policy.Tier{Name: name, Features: in.Features, Models: in.Models, Description: in.Description}
	if t.Features == nil {
		t.Features = []string{}
	}
	if in.Shadow != nil {
		t.Shadow = &policy.RequestLimits{}
	}
	for f := range policy.FieldsIn(policy.ScopeTier) {
		i := f.ID()
		f.Set(&t, in.Limits[i])
		if !f.Optional && !present[f.Name] {
			problems[f.Name] = append(problems[f.Name], f.Name+" is required")
		}
		if t.Shadow == nil || !f.InRequestLimits() {
			continue
		}
		t.Shadow.Limits.Set(f, in.Shadow.Limits[i])
		if field := "shadow." + f.Name; !present[field] {
			problems[field] = append(problems[field], field+" is required")
		}
	}
	if in.Account != nil {
		a := in.Account.Limits
		t.Account = &a
	}
	if in.Shadow != nil && in.Shadow.Account != nil {
		a := in.Shadow.Account.Limits
		t.Shadow.Account = &a
	}
	if in.Run != nil {
		r := in.Run.Limits
		t.Run, t.RunRequired = &r, in.Run.Required
	}
	for _, fe := range t.ValidateFields() {
		if fe.Field != "name" && problems[fe.Field] == nil { // said above, in the API's words
			problems[fe.Field] = append(problems[fe.Field], fe.Message)
		}
	}
	var list []string
	for _, field := range tierFields {
		list = append(list, problems[field]...)
	}
	return t, list
}

func (s *Server) handleListTiers(c echo.Context) error {
	tiers, err := s.svc.Tiers(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]tierJSON, len(tiers))
	for i, t := range tiers {
		out[i] = tierToJSON(t)
	}
	return c.JSON(http.StatusOK, map[string]any{"tiers": out})
}

func (s *Server) handleGetTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	t, err := s.svc.Tier(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, tierToJSON(t))
}

func (s *Server) handlePutTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	data, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err // the body limit's 413, or a broken connection
	}
	t, problems := readTier(data, name)
	if len(problems) > 0 {
		return policy.Errorf(policy.EINVALID, "%s", problems[0])
	}
	ctx := policy.WithChangeSource(c.Request().Context(), policy.SourceAPI)
	// If-None-Match: * (RFC 9110, section 13.1.2) makes the PUT create
	// only, so that a client never replaces a tier made by someone else.
	// Other values name entity tags, which tiers do not have: none can
	// match, so the PUT goes ahead.
	if ifNoneMatchAny(c.Request().Header.Values("If-None-Match")) {
		t, err := s.svc.CreateTier(ctx, t)
		if policy.ErrorCode(err) == policy.ECONFLICT {
			return echo.NewHTTPError(http.StatusPreconditionFailed, policy.ErrorMessage(err)+" (If-None-Match: *)")
		}
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, tierToJSON(t))
	}
	t, created, err := s.svc.PutTier(ctx, t)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return c.JSON(status, tierToJSON(t))
}

// ifNoneMatchAny reports whether If-None-Match header values are "*".
func ifNoneMatchAny(values []string) bool {
	for _, v := range values {
		for _, tag := range strings.Split(v, ",") {
			if strings.TrimSpace(tag) == "*" {
				return true
			}
		}
	}
	return false
}

func (s *Server) handleDeleteTier(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	if err := s.svc.DeleteTier(policy.WithChangeSource(c.Request().Context(), policy.SourceAPI), name); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
