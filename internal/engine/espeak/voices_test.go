package espeak

import (
	"slices"
	"testing"
)

const voicesHeader = "Pty Language       Age/Gender VoiceName          File                 Other Languages\n"

// someVoices is an excerpt of espeak-ng 1.51's --voices.
const someVoices = voicesHeader +
	" 5  af              --/M      Afrikaans          gmw/af               \n" +
	" 5  chr-US-Qaaa-x-west --/M      Cherokee_          iro/chr              \n" +
	" 5  de              --/M      German             gmw/de               \n" +
	" 2  en-gb           --/M      English_(Great_Britain) gmw/en               (en 2)\n" +
	" 2  en-us           --/M      English_(America)  gmw/en-US            (en 3)\n" +
	" 5  yue             --/M      Chinese_(Cantonese) sit/yue              (zh-yue 5)(zh 8)\n" +
	" 5  yue             --/M      Chinese_(Cantonese,_latin_as_Jyutping) sit/yue-Latn-jyutping (zh-yue 5)(zh 8)\n" +
	" 5  fr-fr           --/M      French_(France)    roa/fr               (fr 5)\n"

func TestParseVoices(t *testing.T) {
	tests := []struct {
		name     string
		table    string
		names    []string
		fallback string
		files    map[string]string
	}{{
		name:     "espeak-ng 1.51",
		table:    someVoices,
		names:    []string{"af", "chr-US-Qaaa-x-west", "de", "en-gb", "en-us", "fr-fr", "yue"},
		fallback: "en-us",
		files:    map[string]string{"chr-US-Qaaa-x-west": "iro/chr", "en-us": "gmw/en-US", "yue": "sit/yue"},
	}, {
		name: "no American English",
		table: voicesHeader +
			" 5  en-gb-scotland  --/M      English_(Scotland) gmw/en-GB-scotland   (en 4)\n" +
			" 2  en-gb           --/M      English_(Great_Britain) gmw/en               (en 2)\n" +
			" 5  de              --/M      German             gmw/de               \n",
		names:    []string{"de", "en-gb", "en-gb-scotland"},
		fallback: "en-gb",
	}, {
		name:     "no English",
		table:    voicesHeader + " 5  de              --/M      German             gmw/de               \n",
		names:    []string{"de"},
		fallback: "de",
	}, {
		name:     "short lines are skipped",
		table:    voicesHeader + "\n 5  de\n 5  fr              --/M      French             roa/fr\n",
		names:    []string{"fr"},
		fallback: "fr",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, err := parseVoices([]byte(tt.table))
			if err != nil {
				t.Fatalf("parseVoices: %v", err)
			}
			if !slices.Equal(vs.names, tt.names) {
				t.Errorf("names = %q, want %q", vs.names, tt.names)
			}
			if vs.fallback != tt.fallback {
				t.Errorf("fallback = %q, want %q", vs.fallback, tt.fallback)
			}
			for name, file := range tt.files {
				if vs.files[name] != file {
					t.Errorf("file of %s = %q, want %q", name, vs.files[name], file)
				}
			}
		})
	}
}

func TestParseVoicesEmpty(t *testing.T) {
	for _, table := range []string{"", voicesHeader} {
		if vs, err := parseVoices([]byte(table)); err == nil {
			t.Errorf("parseVoices(%q) = %+v, want an error", table, vs)
		}
	}
}
