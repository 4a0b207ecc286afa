package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// wordList is the simulator's vocabulary: one word is one token. The words
// are plain ASCII letters so that they can go into JSON strings as they are.
const wordList = `
the of and to in is that for it as was with be by on not he this are or his
from at which but have an they you were her she there been one all we their
has would when if so no will can more about out up them some could what into
than only other time new very also then these two may first any like now my
over such our man me even most made after way many must before years where
through back much good well should people each just those work how too being
great state year life still world between down own under never last both day
might while system same house another long part small number around however
place found again high every because light water old along river
garden morning evening window question answer reason model token engine signal
quiet bright gentle simple careful steady patient curious narrow open clear
across beyond inside outside toward within without upon among behind near
carry follow gather measure notice offer prepare reach return share travel
wonder build choose explain imagine improve listen remember suggest consider
mountain valley forest ocean island harbor village city road bridge tower
paper letter story picture music voice colour shadow silver golden green
stone glass wood iron cloud rain snow wind summer winter autumn spring
little large early late quick slow warm cold soft strong fresh ancient modern
kind honest bold calm eager fair proud wise brave happy
always often sometimes rarely perhaps indeed certainly probably usually
together already almost enough quite rather really simply soon
idea method pattern detail result example process problem solution moment
journey season harvest market lantern compass anchor feather ribbon candle
table chair door floor wall roof corner step path field meadow orchard
`

// vocabulary is wordList split once; it is never modified.
var vocabulary = strings.Fields(wordList)

// seed identifies a request for the generator: the same model, messages
// and seed give the same digest and so the same reply.
type seed [sha256.Size]byte

func newSeed(model string, messagesJSON []byte, reqSeed *wholeInt) seed {
	h := sha256.New()
	h.Write([]byte(model))
	h.Write([]byte{0})
	h.Write(messagesJSON)
	h.Write([]byte{0})
	if reqSeed != nil {
		h.Write([]byte("seed=" + strconv.FormatInt(int64(*reqSeed), 10)))
	}
	var s seed
	h.Sum(s[:0])
	return s
}

// choice is the seed of choice i of a reply of several (n): choice 0 is
// the reply a request for one gets, and each other differs from it.
func (s seed) choice(i int) seed {
	if i == 0 {
		return s
	}
	return sha256.Sum256(append(s[:], "choice="+strconv.Itoa(i)...))
}

// rng is a PRNG for one purpose ("content", "reasoning", ...). Separate
// streams keep the answer the same whatever the thinking length.
func (s seed) rng(purpose string) *rand.Rand {
	d := sha256.Sum256(append(s[:], purpose...))
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(d[0:8]), binary.LittleEndian.Uint64(d[8:16])))
}

// hex returns n hex digits derived from the seed and purpose, for ids.
func (s seed) hex(purpose string, n int) string {
	d := sha256.Sum256(append(s[:], purpose...))
	return hex.EncodeToString(d[:])[:n]
}

// unit is a number in [0,1) derived from the seed and purpose.
func (s seed) unit(purpose string) float64 {
	return s.rng(purpose).Float64()
}

// words generates the first n of total tokens of English-like text: the
// first token has no leading space, the others do; sentences start with a
// capital and end with a period, and the text ends a sentence at token
// total-1. Generating fewer than total tokens gives a prefix of the full
// text, so a capped reply is the start of the uncapped one.
func words(r *rand.Rand, n, total int) []string {
	n = min(n, total)
	out := make([]string, 0, n)
	sentence := 0 // words left in the current sentence
	for i := range n {
		w := vocabulary[r.IntN(len(vocabulary))]
		if sentence == 0 {
			sentence = 6 + r.IntN(10)
			w = capitalize(w)
		}
		sentence--
		comma := r.IntN(9) == 0
		switch {
		case i == total-1 || sentence == 0:
			w += "."
			sentence = 0
		case comma && sentence > 1:
			w += ","
		}
		if i > 0 {
			w = " " + w
		}
		out = append(out, w)
	}
	return out
}

func capitalize(w string) string {
	r, size := utf8.DecodeRuneInString(w)
	return string(unicode.ToUpper(r)) + w[size:]
}

// splitTokens cuts text into tokens before each space, so that the tokens
// concatenate back to text. It is how JSON replies are streamed.
func splitTokens(text string) []string {
	var out []string
	start := 0
	for i := 1; i < len(text); i++ {
		if text[i] == ' ' && text[i-1] != ' ' {
			out = append(out, text[start:i])
			start = i
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// splitBytes cuts s into pieces of about size bytes on rune boundaries; it
// splits tool-call arguments across deltas as engines do.
func splitBytes(s string, size int) []string {
	var out []string
	for len(s) > size {
		cut := size
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}
