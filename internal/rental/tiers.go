package rental

// Tier is a jurisdiction tier: where a machine is and who runs it. A
// higher rank is a stricter placement; an organisation's jurisdiction
// floor admits its tier and every tier ranked above it.
type Tier struct {
	ID          string
	Label       string
	Rank        int
	Description string
}

// Tier ids.
const (
	TierUKSovereign = "uk-sovereign"
	TierUK          = "uk"
	TierAdequacy    = "adequacy"
	TierGlobal      = "global"
)

// Tiers are the jurisdiction tiers, strictest first.
func Tiers() []Tier {
	return []Tier{
		{TierUKSovereign, "UK sovereign", 3, "A data centre in the UK run by a UK-domiciled operator."},
		{TierUK, "UK", 2, "A data centre in the UK; the operator may be domiciled elsewhere."},
		{TierAdequacy, "UK adequacy", 1, "A data centre in a country the UK recognises as adequate for personal data (the EEA and others)."},
		{TierGlobal, "Global", 0, "Any data centre, anywhere."},
	}
}

// adequate lists the countries (ISO 3166-1 alpha-2) outside the UK that
// UK data-protection law recognises as adequate: the EEA and the
// countries with UK adequacy regulations.
var adequate = map[string]bool{
	"AT": true, "BE": true, "BG": true, "HR": true, "CY": true, "CZ": true, "DK": true, "EE": true, "FI": true,
	"FR": true, "DE": true, "GR": true, "HU": true, "IE": true, "IT": true, "LV": true, "LT": true, "LU": true,
	"MT": true, "NL": true, "PL": true, "PT": true, "RO": true, "SK": true, "SI": true, "ES": true, "SE": true,
	"IS": true, "LI": true, "NO": true,
	"AD": true, "AR": true, "CA": true, "FO": true, "GG": true, "IL": true, "IM": true, "JP": true, "JE": true,
	"NZ": true, "KR": true, "CH": true, "UY": true,
}

// TierFor is the strictest tier a machine in country, run by an operator
// domiciled in domicile, satisfies.
func TierFor(country, domicile string) string {
	switch {
	case country == "GB" && domicile == "GB":
		return TierUKSovereign
	case country == "GB":
		return TierUK
	case adequate[country]:
		return TierAdequacy
	default:
		return TierGlobal
	}
}

func tierByID(id string) (Tier, bool) {
	for _, t := range Tiers() {
		if t.ID == id {
			return t, true
		}
	}
	return Tier{}, false
}
