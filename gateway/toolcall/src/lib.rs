//! Tool calls parsed out of the plain text of models without native function
//! calling.
//!
//! [`parse`] takes a whole model output; [`StreamParser`] takes it chunk by
//! chunk and, over any chunking, produces exactly what [`parse`] produces
//! for the concatenated text (same calls in the same order, same content,
//! same reasoning). Neither ever fails or panics: text that does not parse
//! as a call stays content.
//!
//! # Order of work
//!
//! 1. **Reasoning** is split off first (see below), so a call-shaped string
//!    inside `<think>…</think>` is never a call.
//! 2. The rest is scanned left to right for places where a call could start
//!    (`<`, `[`, `{`, a code fence, the word `functools`, and `;`/`,` right
//!    after a call). Each is decided by the family parsers; text that is not
//!    part of an accepted call is content.
//!
//! # Accepted families
//!
//! - **Hermes / Qwen**: `<tool_call>{json}</tool_call>`, one or several, a
//!   JSON array or several JSON objects inside one tag, the closing tag
//!   missing at the end, code fences inside the tag. Tag variants:
//!   `<|tool_call|>` (Granite), `<tool_calls>` (Jamba, MiniMax, Hunyuan),
//!   `<tools>`, `<tool>`, `<function_call>`, `<response>`, `<json>`, `<xml>`
//!   (tag names match ASCII case-insensitively), `<seed:tool_call>`,
//!   `<TOOLCALL>`, `<|tool_call_start|>`, `<|action_start|><|plugin|>`
//!   (InternLM2), `<ifm|tool_calls>` and `<ifm|tool_call>` (Kimi K2
//!   "horizon").
//! - **Bare or fenced JSON**: `{"name", "arguments"|"parameters"}` (also
//!   `tool_name`, or a string `function`, for the name; `args` for the
//!   arguments), an array of them, `{"tool_calls": [...]}`, OpenAI's
//!   `{"function": {"name", "arguments"}}`; inside a code fence
//!   (```` ```json ````, ```` ```xml ````, plain); behind `[TOOL_CALLS]`
//!   (Mistral, including v11's `[TOOL_CALLS]name{json}`), `functools`
//!   (Phi-4-mini, FireFunction) or `<|python_tag|>` (Llama 3.x).
//!   Several bare objects separated by `;` or `,` are consumed together.
//! - **XML functions**: `<function=name>` with `<parameter=key>value</parameter>`
//!   children (Qwen3-Coder, Seed-OSS), `<function=name>{json}</function>`
//!   (Llama 3.1, Functionary v3.1), `<function name="...">` with
//!   `<param name="k" type="t">v</param>` children or attribute-style
//!   `<param name="k" value="v" type="t"/>` ones (BFCL), inside a wrapper
//!   or not (MiniCPM's byte-level `Ġ` spaces and collapsed
//!   `<functionname=` tags read alike); MiniMax-M2's
//!   `<minimax:tool_call><invoke name="f">` with
//!   `<parameter name="k">v</parameter>` children (a value may hold
//!   `</parameter>`: it ends at the closer the next parameter or
//!   `</invoke>` follows), and the same items in dots'
//!   `<dots_function_call>`, DeepSeek V3.2's DSML
//!   (`<｜DSML｜function_calls>`, V4's `<｜DSML｜tool_calls>`, V4.1's spaced
//!   `<｜DSML｜ calls>`; `string="true|false"` is a hint the schema
//!   overrides; a closer misspelled short, `</｜DSML｜>`, ends its value
//!   when the next parameter follows), Step3's `<steptml:invoke>`, and
//!   namespaced XML of any prefix and wrapper name
//!   (`<P:function_calls><P:invoke name="f"><P:parameter name="k">v</P:parameter>…`;
//!   the wrapper's first child must be an invoke). These `<invoke>`
//!   families take a value as written, whitespace and entities included
//!   (their templates write values raw, inline); in the others a value's
//!   entities are decoded (`S&amp;P` is `S&P`). In every XML family a CDATA
//!   section is taken as written, and a value holding its format's own
//!   item markup (a closer the model forgot) makes the call *unreadable*
//!   ([`ParsedCall::unreadable`]): not an argument, and the gateway tells
//!   the model so.
//! - **Pythonic**: `[get_weather(city="Paris"), add(a=1, b=2)]` (keyword
//!   arguments, Python literals — sets read as lists, raw line breaks in
//!   strings kept, as LFM2 writes them, bytes and raw strings read as
//!   text —, nested; a string's own quote written unescaped inside it is
//!   text unless what follows it may follow a value, as in
//!   `command='sed -n '1,5p' f'`; a call of a tool not offered beside
//!   offered ones stays content), bare or in a wrapper
//!   (`<|python_start|>`, `<function_calls>`, `<TOOLCALL>`,
//!   `<|tool_call_start|>`); inside a wrapper or code fence the calls may
//!   also be written without brackets, one per line
//!   (`<|python_tag|>tool.call(code="...")` included).
//! - **Framed messages**: gpt-oss Harmony (`<|channel|>commentary
//!   to=functions.f <|constrain|>json<|message|>{…}<|call|>`, the recipient
//!   in the role or the channel header; `final` and other messages without
//!   a recipient are content; frame tokens dropped) and Kimi K3's XTML
//!   (`<|open|>call tool="f"<|sep|><|open|>argument key="k"
//!   type="T"<|sep|>v<|close|>argument<|sep|>…`).
//! - **Others**: GLM-4.5/4.7 (`<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>`,
//!   or the name then JSON arguments, `<tool_call>name\n{json}</tool_call>`;
//!   Hunyuan HY v3's `name<tool_sep>` inside `<tool_calls>`; Kimi K2
//!   "horizon"'s `<ifm|arg_key>` pairs, an `<ifm|arg_type>` hint between),
//!   DeepSeek V3/R1/V3.1 special tokens, Kimi K2 sections (stray text
//!   between the markers is content), Step3's `<｜tool_calls_begin｜>`
//!   sections (`function<｜tool_sep｜>` optional, `<｜tool_sep｜>` between
//!   calls), Gemma 4 (`<|tool_call>call:f{k:<|"|>v<|"|>,n:1}<tool_call|>`;
//!   also `<|tool_call>:call:f{…}`, the opener split into `<call>f{…}`, and
//!   a bare `call:f{…}` at the start of a word) and FunctionGemma
//!   (`<start_function_call>call:f{k:<escape>v<escape>}<end_function_call>`);
//!   in their notation a key or value in double quotes is one JSON string,
//!   separators and escapes included (`q:"a,b:c"`),
//!   Apertus (`<|tools_prefix|>[{"f": {…}}]<|tools_suffix|>`), MiniMax-M3
//!   (every tag behind `]<]minimax[>[`, arguments as elements: nested
//!   elements an object, `<item>`s an array), Functionary
//!   v3.2 (`>>>f` then JSON on the next line; the first call without `>>>`,
//!   which the prompt wrote, when the body starts with an offered tool's
//!   name alone on its line; `>>>all` dropped).
//!
//! Not supported (the text stays content): Harmony's built-in tools
//! (`to=browser.search`, `to=python` when no such tool is offered),
//! Functionary's `python` recipient, a message that starts `all` without
//! `>>>`, bare pythonic calls without brackets outside a wrapper or fence,
//! positional pythonic arguments.

//! # Policies
//!
//! - **Only offered tools.** A call is accepted only when its name is an
//!   offered tool (after stripping a `functions.` prefix or a `.call`
//!   suffix). A block naming an unoffered tool stays content; no call is
//!   ever invented.
//! - **Arguments are required.** A call-shaped object must have an
//!   `arguments`/`parameters` member (an object, a JSON string holding an
//!   object, which is decoded, or null for none). `{"name": "x"}` alone is
//!   content, and so is a tool's definition (a `description` beside
//!   `parameters` that is a JSON Schema with `type` and `properties`).
//! - **JSON that follows prose is accepted.** A bare JSON value (or bare
//!   pythonic list) anywhere in the text is a call when it is call-shaped,
//!   names an offered tool and has arguments — at the start or after prose
//!   (`Here is the result: {"name": ..., "parameters": {...}}`). The prose
//!   stays content. A call must be a top-level value: a complete JSON value
//!   that is not itself call-shaped is content as a whole, nothing inside it
//!   is extracted. (Ollama treats untagged JSON after prose as text;
//!   llama.cpp and vLLM's Llama 3 parser extract it. The gateway only offers
//!   tools it can run and validates arguments, so extraction is the useful
//!   choice.)
//! - **Broken JSON.** Bare JSON must be valid. After an explicit marker
//!   (wrapper tag, fence, `[TOOL_CALLS]`, `functools`), a closing bracket
//!   that skips an unclosed container is repaired (`[{"a": {...}]`), and a
//!   truncated or broken array keeps its complete leading elements. In one
//!   tag holding one object per line, an invalid line is left as content and
//!   the following lines still parse.
//! - **A last string never closed** (JSON after an explicit marker, Gemma's
//!   notation) is repaired at the end of the output only, and only when
//!   nothing else could be meant: what follows its opening quote ends with
//!   exactly the closers of the open containers and/or the block's closing
//!   marker (`command:<|"|>ls}<tool_call|>` is `{"command": "ls"}`). Text
//!   that merely stops inside a string, a number or a partial set of
//!   closers is a cut-off output, and stays content. Gemma's containers
//!   left open by a complete last value that the block's closing marker
//!   follows, at the end of the output, are closed too.
//! - **Repairs are counted.** A call read from repaired text (either rule
//!   above) has [`ParsedCall::repaired`] set, and [`Parsed::repaired`]
//!   counts them; the flag is not part of a call's equality.
//! - **Nothing is lost.** Text that is not part of an accepted call —
//!   prose, an incomplete call, an unoffered call, text between or after
//!   calls — is content. Whitespace: the content's leading and trailing
//!   whitespace is trimmed, and the whitespace around a removed call
//!   collapses to one `"\n"` (if it had a line break) or `" "`.
//! - **Coercion.** A value whose type is not one the tool's schema declares
//!   for that property is converted to it where it reads as it (`"5"` → `5`
//!   for `integer`, `"true"` → `true`, JSON or Python literal text →
//!   object/array, numbers → string for `string`), in every family, JSON
//!   ones included (models quote numbers); it is left as written when the
//!   schema declares no type or the value does not read as it. A value of a
//!   declared type is never changed. Text `null` for a property that may be
//!   null is null. A schema's local `$ref`s (`#/$defs/…`, any pointer into
//!   itself) are inlined first, within a depth and size bound.
//! - **Reasoning.** `<think>…</think>` (also `<thinking>`, `<seed:think>`,
//!   Harmony's `analysis` channel, Gemma 4's `<|channel>thought`, Apertus's
//!   `<|inner_prefix|>`, Kimi K3's `<|open|>think<|sep|>`) is split off into
//!   [`Parsed::reasoning`] before anything else. Where the template opened
//!   the reasoning (a closer with no opener), a call marker of any family
//!   before the closer from which a call of an offered tool reads ends it
//!   there, and the call is read (vLLM#39056). The first
//!   think tag decides: a closing tag with no opener makes everything before
//!   it reasoning; an opener makes what follows it reasoning up to its
//!   closer, calls included (the model was thinking about them). An opener
//!   never closed (the serving engine returned the template's `<think>`, and
//!   the model called without closing it) makes what follows it reasoning
//!   up to the first call marker (the same markers) from which a call of an
//!   offered tool reads to the end of the output; the call is read, and
//!   what follows it is read as after any call. Only the first eight
//!   markers within the last 64 KiB of the output are tried: one further
//!   back, or from which no offered call reads, stays reasoning. A
//!   [`StreamParser`] holds an open block's text back from such a marker (at
//!   most 64 KiB of it) until the closer, the end, or as soon as no call can
//!   read from there; the reasoning before it streams. Because of the
//!   closing-tag rule, a [`StreamParser`] cannot
//!   release any text before the first think tag (or the end) — it might
//!   turn out to be reasoning. [`ParseOptions::orphan_think_close`] turns the
//!   rule off for models known not to pre-open `<think>`, so content streams
//!   immediately.
//!
//! # Cost
//!
//! Linear in the input, with no recursion on input structure: JSON and
//! Python literal nesting is tracked on the heap and capped at 128 levels
//! (deeper values are content); substring searches are memoised; a failed
//! bare JSON value is skipped as a whole rather than re-scanned from every
//! bracket inside it. The stream parser holds text back only from a
//! possible call start, and retries an undecided candidate only after its
//! pending text doubled (or at [`StreamParser::finish`]), so streaming stays
//! linear for any chunking; in a reasoning block not closed yet, a held
//! call marker is looked at again only after as much text again as the
//! last look read. The price is latency: a call is recognised at
//! the latest once as much text again as the call itself has arrived after
//! its start, or at `finish`; text after it waits as long.

mod calls;
mod channels;
mod coerce;
mod engine;
mod families;
mod gemma;
mod json_scan;
mod minimax_m3;
mod offered;
mod python;
mod python_literal;
mod reasoning;
mod sections;
mod text;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_census;
#[cfg(test)]
mod tests_conformance;
#[cfg(test)]
mod tests_prop;

use self::engine::{Engine, Out};
use self::offered::Tools;
pub use self::offered::{OfferedTool, ParsedCall};
use self::reasoning::{Front, FrontOut, Sink};

/// Result of parsing a whole model output.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    /// The text that is not reasoning and not part of a call.
    pub content: String,
    pub calls: Vec<ParsedCall>,
    /// Reasoning split off from `<think>` blocks; `None` when there is none.
    pub reasoning: Option<String>,
    /// How many of [`calls`](Self::calls) were read from repaired text
    /// ([`ParsedCall::repaired`]): a metric of how often models need it. A
    /// [`StreamParser`]'s caller counts the flag on each call.
    pub repaired: usize,
}

/// Options for [`parse_with_options`] and [`StreamParser::with_options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseOptions {
    /// Treat a `</think>` with no opening tag as the end of reasoning
    /// (everything before it is reasoning). Default: true.
    pub orphan_think_close: bool,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            orphan_think_close: true,
        }
    }
}

/// Whole-text parse. Never fails, never panics.
pub fn parse(text: &str, tools: &[OfferedTool]) -> Parsed {
    parse_with_options(text, tools, ParseOptions::default())
}

/// [`parse`] with explicit options.
pub fn parse_with_options(text: &str, tools: &[OfferedTool], options: ParseOptions) -> Parsed {
    let mut p = StreamParser::with_tools(Tools::new(tools), options);
    let mut events = p.push(text);
    events.extend(p.finish());
    let mut out = Parsed::default();
    let mut reasoning = String::new();
    for e in events {
        match e {
            StreamEvent::Content(s) => out.content.push_str(&s),
            StreamEvent::Reasoning(s) => reasoning.push_str(&s),
            StreamEvent::Call(c) => {
                out.repaired += usize::from(c.repaired);
                out.calls.push(c);
            }
        }
    }
    if !reasoning.is_empty() {
        out.reasoning = Some(reasoning);
    }
    out
}

/// An event of [`StreamParser`].
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    Content(String),
    Reasoning(String),
    Call(ParsedCall),
}

/// Incremental parser fed the model's text chunk by chunk.
///
/// Content is emitted as it arrives, except text that might begin a call (a
/// prefix of a marker, an opening `{`/`[`, a `<`), which is held back until
/// decided, trailing whitespace (held until it is known not to be trailing),
/// and — unless [`ParseOptions::orphan_think_close`] is off — everything
/// before the first think tag (see the module docs). Reasoning is emitted as
/// it arrives too, except, in a block not closed yet, the text from a call
/// marker from which a call may read (at most 64 KiB of it): the block may
/// end there, unclosed (see the module docs).
pub struct StreamParser {
    tools: Tools,
    front: Front,
    engine: Engine,
    content: Sink,
    reasoning: Sink,
}

impl StreamParser {
    pub fn new(tools: Vec<OfferedTool>) -> Self {
        Self::with_options(tools, ParseOptions::default())
    }

    pub fn with_options(tools: Vec<OfferedTool>, options: ParseOptions) -> Self {
        Self::with_tools(Tools::new(&tools), options)
    }

    fn with_tools(tools: Tools, options: ParseOptions) -> Self {
        StreamParser {
            tools,
            front: Front::new(options.orphan_think_close),
            engine: Engine::default(),
            content: Sink::default(),
            reasoning: Sink::default(),
        }
    }

    pub fn push(&mut self, chunk: &str) -> Vec<StreamEvent> {
        self.step(chunk, false)
    }

    pub fn finish(mut self) -> Vec<StreamEvent> {
        self.step("", true)
    }

    fn step(&mut self, chunk: &str, eof: bool) -> Vec<StreamEvent> {
        let mut front_out = Vec::new();
        self.front.push(chunk, eof, &self.tools, &mut front_out);
        let mut events = Vec::new();
        for o in front_out {
            match o {
                FrontOut::Body(s) => self.engine.push(&s),
                FrontOut::Break => {
                    // The body before a reasoning block is final.
                    self.drain_engine(true, &mut events);
                    self.engine = Engine::default();
                    self.content.boundary();
                }
                FrontOut::Reason(s) => {
                    self.drain_engine(false, &mut events);
                    let r = self.reasoning.text(&s);
                    push_event(&mut events, StreamEvent::Reasoning(r));
                }
            }
        }
        self.drain_engine(eof, &mut events);
        events
    }

    fn drain_engine(&mut self, eof: bool, events: &mut Vec<StreamEvent>) {
        let mut outs = Vec::new();
        self.engine.advance(eof, &self.tools, &mut outs);
        for o in outs {
            match o {
                Out::Text(t) => {
                    let c = self.content.text(&t);
                    push_event(events, StreamEvent::Content(c));
                }
                Out::Call(c) => {
                    self.content.boundary();
                    events.push(StreamEvent::Call(c));
                }
            }
        }
    }
}

fn push_event(events: &mut Vec<StreamEvent>, e: StreamEvent) {
    match (&e, events.last_mut()) {
        (StreamEvent::Content(s) | StreamEvent::Reasoning(s), _) if s.is_empty() => {}
        (StreamEvent::Content(s), Some(StreamEvent::Content(prev))) => prev.push_str(s),
        (StreamEvent::Reasoning(s), Some(StreamEvent::Reasoning(prev))) => prev.push_str(s),
        _ => events.push(e),
    }
}
