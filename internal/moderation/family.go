package moderation

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/svc-dev/svc/internal/api"
)

// Role says whose message a check judges.
type Role string

// Roles of a check. The zero Role is RoleUser: the moderations endpoint and
// prompt filtering judge what a user sent.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Check is what one guard call judges: texts and images together. For
// RoleAssistant (a response check, content filtering of a chat reply)
// Prompt is the user turn the reply answers and Texts the reply; guards
// judge a reply in the light of what it answers.
type Check struct {
	Role   Role
	Prompt string
	Texts  []string
	// Images have Data set (decoded by the gateway or fetched by the
	// worker) by the time a prompt is built.
	Images []api.ModerationImage
}

// Verdict is a guard's answer, before it is mapped onto the categories.
type Verdict struct {
	Unsafe bool
	// Borderline is guard-b's Controversial: flagged, scored 0.5. It
	// implies a flag even when Unsafe is not set.
	Borderline bool
	// Labels are the guard's own labels as it wrote them ("S1",
	// "Violent", "O2: Violence, Harm, or Cruelty").
	Labels []string
}

// ErrInvalidVerdict is wrapped by Family.Parse when the model's answer is
// neither safe nor unsafe in its family's format (moderation_invalid_verdict).
var ErrInvalidVerdict = errors.New("guard answer is neither safe nor unsafe")

// GuardCall is what the worker sends the guard model's engine for one
// check. Kind is api.KindChat (Body: an OpenAI chat.completions request)
// or api.KindCompletion (Body: an OpenAI /v1/completions request carrying
// the exact raw prompt).
type GuardCall struct {
	Kind string
	Body []byte
}

// Mapping is one row of a family's label table: a label the guard writes
// and the categories it sets. The tables are data so the docs can
// reproduce them.
type Mapping struct {
	// Label is what the guard writes: "S1", "Violent", "O2".
	Label string
	// Name is the label's name in the guard's own policy (for guard-a,
	// the short name its prompt lists).
	Name string
	// Categories are the spec categories the label sets, in spec order.
	// Empty means the label is known but sets none of the family's
	// categories beyond svc/unspecified.
	Categories []string
	// Sizes limits the row to these sizes of the family; nil means every
	// size knows the label.
	Sizes []string
}

// guardKind tells the families apart. The zero value is no family, so a
// Family built by hand rather than by Lookup does nothing.
type guardKind uint8

const (
	noGuard guardKind = iota
	guardA
	guardB
	guardC
)

// Family is a catalogue moderation model: a guard family and one size.
type Family struct {
	Name string // guard-a, guard-b, guard-c
	Size string // 1b, 8b, 0.6b, ...
	kind guardKind
}

// catalogue is the spec's moderation models in the spec's order, built
// afresh on each call so nothing can change it.
func catalogue() []Family {
	return []Family{
		{Name: "guard-a", Size: "1b", kind: guardA},
		{Name: "guard-a", Size: "8b", kind: guardA},
		{Name: "guard-b", Size: "0.6b", kind: guardB},
		{Name: "guard-b", Size: "4b", kind: guardB},
		{Name: "guard-b", Size: "8b", kind: guardB},
		{Name: "guard-c", Size: "4b", kind: guardC},
		{Name: "guard-c", Size: "0.8b", kind: guardC},
	}
}

// Catalogue is the moderation model ids of the spec, in the spec's order.
func Catalogue() []string {
	var ids []string
	for _, f := range catalogue() {
		ids = append(ids, f.ID())
	}
	return ids
}

// Lookup returns the family of a catalogue id ("guard-a:1b" is guard-a,
// size 1b); ok is false for ids not in the catalogue. Ids are matched
// exactly, as the catalogue spells them.
func Lookup(id string) (Family, bool) {
	for _, f := range catalogue() {
		if f.ID() == id {
			return f, true
		}
	}
	return Family{}, false
}

// ID is the catalogue id, "guard-a:1b".
func (f Family) ID() string { return f.Name + ":" + f.Size }

// Images reports whether the family judges images (guard-c only).
func (f Family) Images() bool { return f.kind == guardC }

// Checks lists the categories the family reports, in spec order: the
// spec's per-model table. Every result of the family has exactly these
// keys, set or not; a category not listed is one the model does not check.
func (f Family) Checks() []string {
	switch f.kind {
	case guardA:
		return []string{
			catHarassment, catHate, catIllicit, catIllicitViolent, catSelfHarm,
			catSexual, catSexualMinors, catViolence, catCyber, catDisinformation,
			catFraud, catIP, catPrivacy, catSpecializedAdvice, catUnspecified,
		}
	case guardB:
		return []string{
			catHarassment, catHate, catIllicit, catIllicitViolent, catSelfHarm,
			catSexual, catViolence, catCyber, catDisinformation, catFraud,
			catIP, catNudity, catPrivacy, catUnspecified,
		}
	case guardC:
		return []string{
			catHarassment, catHate, catIllicit, catSelfHarm, catSexual,
			catViolence, catDisinformation, catFraud, catNudity, catUnspecified,
		}
	}
	return nil
}

// Mappings is the family's label table (guardATable, guardBTable or
// guardCTable). A row with Sizes applies only to those sizes.
func (f Family) Mappings() []Mapping {
	switch f.kind {
	case guardA:
		return guardATable()
	case guardB:
		return guardBTable()
	case guardC:
		return guardCTable()
	}
	return nil
}

// Call builds the request for one check. localModel is the engine's own
// name for the model and goes in "model". Images sent to a text-only
// family are refused with the spec's image_input_not_supported.
func (f Family) Call(localModel string, c Check) (GuardCall, error) {
	if f.kind == noGuard {
		return GuardCall{}, fmt.Errorf("moderation: %q is not a catalogue model", f.ID())
	}
	if len(c.Images) > 0 && !f.Images() {
		return GuardCall{}, &api.Error{
			Kind:       api.KindInvalidRequest,
			Code:       api.CodeImageInputNotSupported,
			CodeHeader: true,
			Message:    fmt.Sprintf("%s checks text only; send images to a guard-c model", f.ID()),
		}
	}
	switch c.Role {
	case "", RoleUser, RoleAssistant:
	default:
		return GuardCall{}, fmt.Errorf("moderation: unknown check role %q", c.Role)
	}
	switch f.kind {
	case guardA:
		return guardACall(f.Size, localModel, c)
	case guardB:
		return guardBCall(localModel, c)
	default:
		return guardCCall(localModel, c)
	}
}

// Parse reads the guard's answer (chat message content or completion
// text). It wraps ErrInvalidVerdict when the answer is neither safe nor
// unsafe in the family's format, and never panics.
func (f Family) Parse(answer string) (Verdict, error) {
	switch f.kind {
	case guardA:
		return parseGuardA(answer)
	case guardB:
		return parseGuardB(answer)
	case guardC:
		return parseGuardC(answer)
	}
	return Verdict{}, fmt.Errorf("moderation: %q is not a catalogue model", f.ID())
}

// match finds the row of a label this model knows. Labels are matched
// without regard to case: once a model has said unsafe, the mapping must
// not hinge on its capitalisation.
func (f Family) match(label string) (Mapping, bool) {
	label = strings.TrimSpace(label)
	if f.kind == guardC {
		return matchGuardC(label)
	}
	return findLabel(f.Mappings(), label, f.Size)
}

// findLabel finds the row of label in a table, among the rows that apply
// to size.
func findLabel(table []Mapping, label, size string) (Mapping, bool) {
	for _, m := range table {
		if strings.EqualFold(m.Label, label) && m.appliesTo(size) {
			return m, true
		}
	}
	return Mapping{}, false
}

// appliesTo reports whether a row is known to the given size.
func (m Mapping) appliesTo(size string) bool {
	return m.Sizes == nil || slices.Contains(m.Sizes, size)
}

// invalid wraps ErrInvalidVerdict with what was wrong, quoting at most a
// short prefix of the answer: it may be long and it is model output.
func invalid(why, answer string) error {
	const limit = 40
	if len(answer) > limit {
		answer = strings.ToValidUTF8(answer[:limit], "") + "…"
	}
	return fmt.Errorf("%w: %s (answer %q)", ErrInvalidVerdict, why, answer)
}
