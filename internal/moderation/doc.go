// Package moderation is the moderation library of the gateway and the
// worker: the spec's categories and moderation models, the request a
// worker sends a guard model's engine, the parsing of the guard's answer
// and its mapping onto the categories, the validation of a POST
// /v1/moderations body, and the fetching of remote images.
//
// The gateway uses Parse (the request body), Lookup/Catalogue (which
// model is which) and ShapeError (the moderation error table). The worker uses Family.Call to build the engine request
// of one check, Family.Parse to read the answer, Family.Result to turn it
// into a result, and Fetcher to fetch https images before guard-c sees
// them. Nothing here keeps state: tables are built by functions on each
// call, so there is nothing to lock and nothing a caller can corrupt; the
// only package-level variables are sentinel errors.
//
// # Families
//
// Every model of a family shares one prompt format, one answer format and
// one label table; sizes differ only where noted.
//
//	guard-a:1b, guard-a:8b           Llama Guard 3; text; raw completion prompt
//	guard-b:0.6b, guard-b:4b, :8b    Qwen3Guard-Gen; text; plain chat messages
//	guard-c:4b, guard-c:0.8b         LlavaGuard-style JSON; text and images; chat
//
// guard-a is sent the exact prompt of Llama Guard 3's chat template as a
// text completion (api.KindCompletion), "$ROLE" User for a prompt check
// and Agent for a response check, which shows "User: <prompt>" then
// "Agent: <reply>". It answers "safe", or "unsafe" and a line of codes
// ("S1,S10"). The 1B knows S1–S13, the 8B also S14.
//
// guard-b is sent plain chat messages (api.KindChat); its chat template
// builds the guard prompt. It answers "Safety: Safe|Unsafe|Controversial",
// "Categories: …" and, on response checks, "Refusal: Yes|No".
// Controversial is flagged with score 0.5.
//
// guard-c is sent one user message: our LlavaGuard-style policy (O1–O9),
// the text, and each image as a data: URL. It answers
// {"rating":"Safe|Unsafe","category":"O2: …|NA: None applying","rationale":…}.
//
// # Label tables
//
// What each label sets. A label not in its family's table (including S14
// from the 1B) sets svc/unspecified, and so does an unsafe verdict with no
// label. These are guardATable, guardBTable and guardCTable (also
// Family.Mappings); a test keeps this text in step with them.
//
//	guard-a (Llama Guard 3)
//	  S1   Violent Crimes                 illicit/violent, violence
//	  S2   Non-Violent Crimes             illicit, svc/fraud
//	  S3   Sex Crimes                     illicit, sexual
//	  S4   Child Exploitation             sexual, sexual/minors
//	  S5   Defamation                     harassment, svc/disinformation
//	  S6   Specialized Advice             svc/specialized_advice
//	  S7   Privacy                        svc/privacy
//	  S8   Intellectual Property          svc/intellectual_property
//	  S9   Indiscriminate Weapons         illicit/violent
//	  S10  Hate                           hate
//	  S11  Self-Harm                      self-harm
//	  S12  Sexual Content                 sexual
//	  S13  Elections                      svc/disinformation
//	  S14  Code Interpreter Abuse         svc/cyber  (8b only)
//
//	guard-b (Qwen3Guard-Gen)
//	  Violent                        illicit/violent, violence
//	  Non-violent Illegal Acts       illicit
//	  Sexual Content or Sexual Acts  sexual
//	  PII                            svc/privacy
//	  Suicide & Self-Harm            self-harm
//	  Unethical Acts                 harassment, hate
//	  Politically Sensitive Topics   svc/disinformation
//	  Copyright Violation            svc/intellectual_property
//	  Jailbreak                      svc/unspecified
//
//	guard-c (LlavaGuard-style)
//	  O1   Hate, Humiliation, Harassment  harassment, hate
//	  O2   Violence, Harm, or Cruelty     violence
//	  O3   Sexual Content                 sexual
//	  O4   Nudity Content                 svc/nudity
//	  O5   Criminal Planning              illicit, svc/fraud
//	  O6   Weapons or Substance Abuse     illicit
//	  O7   Self-Harm                      self-harm
//	  O8   Animal Cruelty                 violence
//	  O9   Disasters or Emergencies       svc/unspecified
//
// Categories a family reports but its labels cannot set: svc/cyber on
// guard-a:1b; svc/cyber, svc/fraud and svc/nudity on guard-b; and
// svc/disinformation on guard-c. They are always false, and present
// because the spec lists them for the model.
//
// # Results
//
// Scores are 1.0 for a flagged category, 0.5 for a guard-b borderline one
// and 0.0 otherwise. category_applied_input_types is, for every category,
// the input types of the check the family judged: the guard reads the
// whole check against its whole policy at once.
//
// # Text handed to guards
//
// Texts of a check are trimmed and joined with a blank line into one
// message. Special-token spellings ("<|eot_id|>", "<|im_end|>",
// "<start_of_turn>", …) are broken with a space, so checked text cannot
// close the guard's prompt and answer for it.
package moderation
