package sim

import "strings"

// Markers of a Llama Guard 3 prompt, as its chat template writes them.
const (
	lgCategoriesStart   = "<BEGIN UNSAFE CONTENT CATEGORIES>"
	lgCategoriesEnd     = "<END UNSAFE CONTENT CATEGORIES>"
	lgConversationStart = "<BEGIN CONVERSATION>"
	lgConversationEnd   = "<END CONVERSATION>"
	// lgLastRole precedes the role to judge: "... for ONLY THE LAST User
	// message in the above conversation".
	lgLastRole = "ONLY THE LAST "
	lgUser     = "User"
	lgAgent    = "Agent"
)

// llavaPolicyMarker is in every LlavaGuard policy, which asks for the
// "rating" of its JSON template. The policy describes each harm it asks
// about, so the keyword table must not read it.
const llavaPolicyMarker = `"rating"`

// llavaReplyMarker introduces the reply in the worker's LlavaGuard reply
// check, which shows the prompt before it as context: LlavaGuard has no
// reply check of its own. Keep it in step with the worker's layout
// (internal/moderation).
const llavaReplyMarker = "Assistant reply (assess this):"

// readCheck finds what a guard judges in req. A Llama Guard that is sent
// a raw prompt, as a completion or as a message, reads the conversation
// out of it; otherwise the messages are the conversation.
func readCheck(f GuardFormat, req *chatRequest) check {
	if f == LlamaGuard {
		if c, ok := llamaGuardCheck(req.lastUserText()); ok {
			return c
		}
	}
	return messageCheck(f, req.Messages)
}

// messageCheck judges the last user or assistant message: a prompt check,
// or the check of a reply to the user message before it.
func messageCheck(f GuardFormat, msgs []message) check {
	i := lastOf(msgs, "user", "assistant")
	if i < 0 {
		return check{}
	}
	m := &msgs[i]
	if f == LlavaGuard && m.Role == "user" {
		return llavaCheck(m)
	}
	c := check{text: m.text(), reply: m.Role == "assistant"}
	c.content = withoutDirectives(c.text)
	if c.reply {
		if j := lastOf(msgs[:i], "user"); j >= 0 {
			c.prompt = msgs[j].text()
		}
	}
	return c
}

// lastOf is the index of the last message with one of roles, or -1.
func lastOf(msgs []message, roles ...string) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, r := range roles {
			if msgs[i].Role == r {
				return i
			}
		}
	}
	return -1
}

// llavaCheck reads a LlavaGuard message: text and images, with the
// policy among the text parts. Directives count wherever they are; the
// keyword table reads the text but the policy. A reply check judges only
// the text after llavaReplyMarker, the text before being its prompt.
func llavaCheck(m *message) check {
	var all, judged []string
	images := 0
	for _, p := range m.parts() {
		switch {
		case p.Type == "image_url":
			images++
		case p.isText():
			all = append(all, p.Text)
			if !strings.Contains(p.Text, llavaPolicyMarker) {
				judged = append(judged, p.Text)
			}
		}
	}
	c := check{text: strings.Join(all, "\n"), images: images}
	content := strings.Join(judged, "\n")
	if prompt, reply, ok := strings.Cut(content, llavaReplyMarker); ok {
		c.text, c.prompt, c.reply = reply, prompt, true
		content = reply
	}
	c.content = withoutDirectives(content)
	return c
}

// turn is one message of a Llama Guard conversation.
type turn struct{ role, text string }

// llamaGuardCheck reads a raw Llama Guard 3 prompt: the conversation, the
// role whose last message is judged, and the categories listed. ok is
// false when prompt holds no conversation.
func llamaGuardCheck(prompt string) (c check, ok bool) {
	head, rest, ok := strings.Cut(prompt, lgConversationStart)
	if !ok {
		return check{}, false
	}
	// The last end marker and role are the template's: the conversation
	// may quote either.
	conv, tail := rest, ""
	if i := strings.LastIndex(rest, lgConversationEnd); i >= 0 {
		conv, tail = rest[:i], rest[i+len(lgConversationEnd):]
	}
	role := lgUser
	if i := strings.LastIndex(tail, lgLastRole); i >= 0 && strings.HasPrefix(tail[i+len(lgLastRole):], lgAgent) {
		role = lgAgent
	}
	c = check{reply: role == lgAgent, listed: listedCategories(head)}
	turns := conversationTurns(conv)
	if i := lastTurn(turns, role); i >= 0 {
		c.text = turns[i].text
		if c.reply {
			if j := lastTurn(turns[:i], lgUser); j >= 0 {
				c.prompt = turns[j].text
			}
		}
	}
	c.content = withoutDirectives(c.text)
	return c, true
}

// conversationTurns splits a Llama Guard conversation into its turns. A
// turn opens with "User:" or "Agent:" at the start of the block or after
// a blank line; other lines, blank ones included, belong to the turn
// before, as a message may have paragraphs.
func conversationTurns(conv string) []turn {
	var turns []turn
	afterBlank := true
	for line := range strings.Lines(conv) {
		line = strings.TrimRight(line, "\r\n")
		if role, text, ok := turnStart(line); ok && afterBlank {
			turns = append(turns, turn{role: role, text: text})
		} else if n := len(turns); n > 0 {
			turns[n-1].text += "\n" + line
		}
		afterBlank = strings.TrimSpace(line) == ""
	}
	for i := range turns {
		turns[i].text = strings.TrimSpace(turns[i].text)
	}
	return turns
}

// turnStart reads the first line of a turn.
func turnStart(line string) (role, text string, ok bool) {
	for _, r := range []string{lgUser, lgAgent} {
		if rest, ok := strings.CutPrefix(line, r+":"); ok {
			return r, strings.TrimPrefix(rest, " "), true
		}
	}
	return "", "", false
}

// lastTurn is the index of the last turn of role, or -1.
func lastTurn(turns []turn, role string) int {
	for i := len(turns) - 1; i >= 0; i-- {
		if turns[i].role == role {
			return i
		}
	}
	return -1
}

// listedCategories are the codes of the categories block ("S1: Violent
// Crimes." per line); nil when there is no block.
func listedCategories(head string) []string {
	_, rest, ok := strings.Cut(head, lgCategoriesStart)
	if !ok {
		return nil
	}
	block, _, ok := strings.Cut(rest, lgCategoriesEnd)
	if !ok {
		return nil
	}
	codes := []string{}
	for line := range strings.Lines(block) {
		if code, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && isLlamaCode(code) {
			codes = append(codes, code)
		}
	}
	return codes
}
