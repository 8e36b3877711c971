//! `calculator`: arithmetic with functions and constants, parsed by a small
//! recursive-descent parser (no `eval`, nothing but numbers).
//!
//! Grammar (usual precedence; `^` and `**` are right-associative and bind
//! tighter than unary minus, so `-2^2` is -4):
//!
//! ```text
//! expr    = term (("+" | "-") term)*
//! term    = unary (("*" | "/" | "%") unary)*
//! unary   = ("-" | "+") unary | power
//! power   = postfix (("^" | "**") unary)?
//! postfix = primary "!"*
//! primary = number | constant | function "(" expr ("," expr)* ")" | "(" expr ")"
//! ```

use serde_json::Number;
use toolgate::tool;

use toolgate::ToolError;

/// Longest expression accepted, in characters.
const MAX_LEN: usize = 2_000;
/// Deepest nesting accepted (parentheses, unary signs, powers).
const MAX_DEPTH: usize = 64;

/// Evaluate an arithmetic expression: + - * / % ^ (or **), parentheses,
/// factorial (!), constants pi, e, tau, and functions sqrt, cbrt, abs, exp,
/// ln, log (base 10, or log(x, base)), log2, sin, cos, tan, asin, acos,
/// atan, atan2, sinh, cosh, tanh, floor, ceil, round, trunc, min, max, pow,
/// hypot. Angles are in radians.
#[tool(category = "math", read_only)]
pub fn calculator(
    /// The expression, e.g. "2 * (3 + 4)" or "sqrt(2) / 2".
    expression: String,
    /// Round the result to this many digits after the decimal point (0-15).
    #[schemars(range(max = 15))]
    precision: Option<u8>,
) -> Result<Number, ToolError> {
    let value = evaluate(&expression).map_err(|e| ToolError::Failed(e.to_string()))?;
    let value = match precision {
        Some(p) => {
            let factor = 10f64.powi(i32::from(p.min(15)));
            (value * factor).round() / factor
        }
        None => value,
    };
    Ok(to_number(value))
}

/// A number as JSON: integers without a fraction (`14`, not `14.0`).
fn to_number(value: f64) -> Number {
    // Exactly representable integers print as integers.
    const LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53
    if value.fract() == 0.0 && value.abs() < LIMIT {
        #[allow(clippy::cast_possible_truncation)]
        return Number::from(value as i64);
    }
    Number::from_f64(value).unwrap_or_else(|| Number::from(0))
}

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalcError {
    #[error("the expression is empty")]
    Empty,
    #[error("the expression is longer than {MAX_LEN} characters")]
    TooLong,
    #[error("the expression nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("unexpected {found} at position {pos}; expected {expected}")]
    Unexpected {
        found: String,
        pos: usize,
        expected: &'static str,
    },
    #[error("unknown name `{name}` at position {pos}; constants: pi, e, tau; functions: {}", FUNCTIONS.join(", "))]
    UnknownName { name: String, pos: usize },
    #[error("`{name}` takes {expected} argument(s), got {got}")]
    Arity {
        name: String,
        expected: &'static str,
        got: usize,
    },
    #[error("division by zero")]
    DivisionByZero,
    #[error("{0}")]
    Domain(String),
    #[error("the result is not a finite number")]
    NotFinite,
}

const FUNCTIONS: &[&str] = &[
    "sqrt", "cbrt", "abs", "exp", "ln", "log", "log2", "log10", "sin", "cos", "tan", "asin",
    "acos", "atan", "atan2", "sinh", "cosh", "tanh", "floor", "ceil", "round", "trunc", "min",
    "max", "pow", "hypot",
];

/// Evaluates an expression.
pub fn evaluate(expression: &str) -> Result<f64, CalcError> {
    if expression.chars().count() > MAX_LEN {
        return Err(CalcError::TooLong);
    }
    let tokens = lex(expression)?;
    if tokens.is_empty() {
        return Err(CalcError::Empty);
    }
    let mut p = Parser {
        tokens: &tokens,
        at: 0,
        depth: 0,
        end: expression.chars().count(),
    };
    let value = p.expr()?;
    if let Some(t) = p.peek() {
        return Err(CalcError::Unexpected {
            found: t.kind.describe(),
            pos: t.pos,
            expected: "an operator or the end",
        });
    }
    if value.is_finite() {
        Ok(value)
    } else {
        Err(CalcError::NotFinite)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Num(f64),
    Name(String),
    Op(char),
    /// `**`
    Pow,
    LParen,
    RParen,
    Comma,
}

impl Kind {
    fn describe(&self) -> String {
        match self {
            Kind::Num(n) => format!("number {n}"),
            Kind::Name(n) => format!("`{n}`"),
            Kind::Op(c) => format!("`{c}`"),
            Kind::Pow => "`**`".into(),
            Kind::LParen => "`(`".into(),
            Kind::RParen => "`)`".into(),
            Kind::Comma => "`,`".into(),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    /// 1-based character position.
    pos: usize,
}

fn lex(s: &str) -> Result<Vec<Token>, CalcError> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let pos = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_digit() || c == '.' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_digit() || chars[i] == '.' || chars[i] == '_')
            {
                i += 1;
            }
            // Exponent: 1e3, 2.5E-4
            if i < chars.len() && matches!(chars[i], 'e' | 'E') {
                let mut j = i + 1;
                if j < chars.len() && matches!(chars[j], '+' | '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].is_ascii_digit() {
                    while j < chars.len() && chars[j].is_ascii_digit() {
                        j += 1;
                    }
                    i = j;
                }
            }
            let text: String = chars[start..i].iter().filter(|c| **c != '_').collect();
            let n: f64 = text.parse().map_err(|_| CalcError::Unexpected {
                found: format!("`{text}`"),
                pos,
                expected: "a number",
            })?;
            out.push(Token {
                kind: Kind::Num(n),
                pos,
            });
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token {
                kind: Kind::Name(chars[start..i].iter().collect::<String>().to_lowercase()),
                pos,
            });
            continue;
        }
        let kind = match c {
            '*' if chars.get(i + 1) == Some(&'*') => {
                i += 1;
                Kind::Pow
            }
            '+' | '-' | '*' | '/' | '%' | '^' | '!' => Kind::Op(c),
            '×' => Kind::Op('*'),
            '÷' => Kind::Op('/'),
            '−' => Kind::Op('-'),
            '(' => Kind::LParen,
            ')' => Kind::RParen,
            ',' => Kind::Comma,
            other => {
                return Err(CalcError::Unexpected {
                    found: format!("`{other}`"),
                    pos,
                    expected: "a number, a name, an operator or a parenthesis",
                });
            }
        };
        out.push(Token { kind, pos });
        i += 1;
    }
    Ok(out)
}

struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
    depth: usize,
    /// Position just after the last character, for "unexpected end".
    end: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn eat(&mut self, kind: &Kind) -> bool {
        if self.peek().is_some_and(|t| &t.kind == kind) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn unexpected(&self, expected: &'static str) -> CalcError {
        match self.peek() {
            Some(t) => CalcError::Unexpected {
                found: t.kind.describe(),
                pos: t.pos,
                expected,
            },
            None => CalcError::Unexpected {
                found: "the end".into(),
                pos: self.end + 1,
                expected,
            },
        }
    }

    fn enter(&mut self) -> Result<(), CalcError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            Err(CalcError::TooDeep)
        } else {
            Ok(())
        }
    }

    fn expr(&mut self) -> Result<f64, CalcError> {
        let mut value = self.term()?;
        loop {
            if self.eat(&Kind::Op('+')) {
                value += self.term()?;
            } else if self.eat(&Kind::Op('-')) {
                value -= self.term()?;
            } else {
                return Ok(value);
            }
        }
    }

    fn term(&mut self) -> Result<f64, CalcError> {
        let mut value = self.unary()?;
        loop {
            if self.eat(&Kind::Op('*')) {
                value *= self.unary()?;
            } else if self.eat(&Kind::Op('/')) {
                let d = self.unary()?;
                if d == 0.0 {
                    return Err(CalcError::DivisionByZero);
                }
                value /= d;
            } else if self.eat(&Kind::Op('%')) {
                let d = self.unary()?;
                if d == 0.0 {
                    return Err(CalcError::DivisionByZero);
                }
                value %= d;
            } else {
                return Ok(value);
            }
        }
    }

    fn unary(&mut self) -> Result<f64, CalcError> {
        self.enter()?;
        let value = if self.eat(&Kind::Op('-')) {
            -self.unary()?
        } else if self.eat(&Kind::Op('+')) {
            self.unary()?
        } else {
            self.power()?
        };
        self.depth -= 1;
        Ok(value)
    }

    fn power(&mut self) -> Result<f64, CalcError> {
        let base = self.postfix()?;
        if self.eat(&Kind::Op('^')) || self.eat(&Kind::Pow) {
            let exponent = self.unary()?;
            return Ok(base.powf(exponent));
        }
        Ok(base)
    }

    fn postfix(&mut self) -> Result<f64, CalcError> {
        let mut value = self.primary()?;
        while self.eat(&Kind::Op('!')) {
            value = factorial(value)?;
        }
        Ok(value)
    }

    fn primary(&mut self) -> Result<f64, CalcError> {
        let Some(token) = self.next() else {
            self.at -= 1;
            return Err(self.unexpected("a number, a name or `(`"));
        };
        match token.kind {
            Kind::Num(n) => Ok(n),
            Kind::LParen => {
                self.enter()?;
                let v = self.expr()?;
                if !self.eat(&Kind::RParen) {
                    return Err(self.unexpected("`)`"));
                }
                self.depth -= 1;
                Ok(v)
            }
            Kind::Name(name) => {
                if self.eat(&Kind::LParen) {
                    self.enter()?;
                    let mut args = vec![self.expr()?];
                    while self.eat(&Kind::Comma) {
                        args.push(self.expr()?);
                    }
                    if !self.eat(&Kind::RParen) {
                        return Err(self.unexpected("`,` or `)`"));
                    }
                    self.depth -= 1;
                    call(&name, &args, token.pos)
                } else {
                    match name.as_str() {
                        "pi" | "π" => Ok(std::f64::consts::PI),
                        "e" => Ok(std::f64::consts::E),
                        "tau" => Ok(std::f64::consts::TAU),
                        _ => Err(CalcError::UnknownName {
                            name,
                            pos: token.pos,
                        }),
                    }
                }
            }
            _ => {
                self.at -= 1;
                Err(self.unexpected("a number, a name or `(`"))
            }
        }
    }
}

fn factorial(n: f64) -> Result<f64, CalcError> {
    if n < 0.0 || n.fract() != 0.0 {
        return Err(CalcError::Domain(format!(
            "factorial needs a non-negative integer, got {n}"
        )));
    }
    if n > 170.0 {
        return Err(CalcError::NotFinite);
    }
    let mut out = 1.0;
    let mut k = 2.0;
    while k <= n {
        out *= k;
        k += 1.0;
    }
    Ok(out)
}

fn call(name: &str, args: &[f64], pos: usize) -> Result<f64, CalcError> {
    let arity = |expected: &'static str| CalcError::Arity {
        name: name.to_owned(),
        expected,
        got: args.len(),
    };
    let one = || -> Result<f64, CalcError> {
        match args {
            [x] => Ok(*x),
            _ => Err(arity("1")),
        }
    };
    let two = || -> Result<(f64, f64), CalcError> {
        match args {
            [x, y] => Ok((*x, *y)),
            _ => Err(arity("2")),
        }
    };
    let domain = |cond: bool, msg: &str| {
        if cond {
            Ok(())
        } else {
            Err(CalcError::Domain(format!("{name}: {msg}")))
        }
    };
    Ok(match name {
        "sqrt" => {
            let x = one()?;
            domain(x >= 0.0, "needs a non-negative number")?;
            x.sqrt()
        }
        "cbrt" => one()?.cbrt(),
        "abs" => one()?.abs(),
        "exp" => one()?.exp(),
        "ln" => {
            let x = one()?;
            domain(x > 0.0, "needs a positive number")?;
            x.ln()
        }
        "log" => match args {
            [x] => {
                domain(*x > 0.0, "needs a positive number")?;
                x.log10()
            }
            [x, base] => {
                domain(
                    *x > 0.0 && *base > 0.0 && *base != 1.0,
                    "needs x > 0 and a positive base other than 1",
                )?;
                x.log(*base)
            }
            _ => return Err(arity("1 or 2")),
        },
        "log2" | "log10" => {
            let x = one()?;
            domain(x > 0.0, "needs a positive number")?;
            if name == "log2" { x.log2() } else { x.log10() }
        }
        "sin" => one()?.sin(),
        "cos" => one()?.cos(),
        "tan" => one()?.tan(),
        "asin" | "acos" => {
            let x = one()?;
            domain((-1.0..=1.0).contains(&x), "needs a number between -1 and 1")?;
            if name == "asin" { x.asin() } else { x.acos() }
        }
        "atan" => one()?.atan(),
        "atan2" => {
            let (y, x) = two()?;
            y.atan2(x)
        }
        "sinh" => one()?.sinh(),
        "cosh" => one()?.cosh(),
        "tanh" => one()?.tanh(),
        "floor" => one()?.floor(),
        "ceil" => one()?.ceil(),
        "round" => one()?.round(),
        "trunc" => one()?.trunc(),
        "pow" => {
            let (x, y) = two()?;
            x.powf(y)
        }
        "hypot" => {
            let (x, y) = two()?;
            x.hypot(y)
        }
        "min" | "max" => {
            if args.is_empty() {
                return Err(arity("at least 1"));
            }
            let fold = if name == "min" { f64::min } else { f64::max };
            args.iter().copied().fold(args[0], fold)
        }
        _ => {
            return Err(CalcError::UnknownName {
                name: name.to_owned(),
                pos,
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(s: &str) -> f64 {
        evaluate(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn arithmetic() {
        assert_eq!(eval("2*(3+4)"), 14.0);
        assert_eq!(eval("1 + 2 * 3"), 7.0);
        assert_eq!(eval("(1 + 2) * 3"), 9.0);
        assert_eq!(eval("10 / 4"), 2.5);
        assert_eq!(eval("10 % 4"), 2.0);
        assert_eq!(eval("2 ^ 3 ^ 2"), 512.0);
        assert_eq!(eval("2 ** 10"), 1024.0);
        assert_eq!(eval("-2 ^ 2"), -4.0);
        assert_eq!(eval("2 ^ -1"), 0.5);
        assert_eq!(eval("--3"), 3.0);
        assert_eq!(eval("1e3 + 2.5E-1"), 1000.25);
        assert_eq!(eval("1_000 * .5"), 500.0);
        assert_eq!(eval("5!"), 120.0);
        assert_eq!(eval("3 × 4 ÷ 2 − 1"), 5.0);
    }

    #[test]
    fn functions_and_constants() {
        assert_eq!(eval("sqrt(16)"), 4.0);
        assert_eq!(eval("max(1, 7, 3)"), 7.0);
        assert_eq!(eval("min(4, -2)"), -2.0);
        assert_eq!(eval("log(1000)"), 3.0);
        assert_eq!(eval("log(8, 2)"), 3.0);
        assert_eq!(eval("abs(-3) + floor(2.7) + ceil(0.2)"), 6.0);
        assert!((eval("sin(pi / 2)") - 1.0).abs() < 1e-12);
        assert!((eval("e") - std::f64::consts::E).abs() < 1e-12);
        assert!((eval("PI") - std::f64::consts::PI).abs() < 1e-12);
        assert_eq!(eval("hypot(3, 4)"), 5.0);
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("   ", "empty"),
            ("2 +", "unexpected the end at position 4"),
            ("(1 + 2", "expected `)`"),
            ("1 + 2)", "unexpected `)` at position 6"),
            ("2 $ 3", "unexpected `$` at position 3"),
            ("foo(2)", "unknown name `foo`"),
            ("x + 1", "unknown name `x` at position 1"),
            ("1 / 0", "division by zero"),
            ("5 % 0", "division by zero"),
            ("sqrt(-1)", "sqrt: needs a non-negative number"),
            ("ln(0)", "ln: needs a positive number"),
            ("max()", "unexpected `)`"),
            ("pow(2)", "`pow` takes 2 argument(s), got 1"),
            ("(-1.5)!", "factorial needs a non-negative integer"),
            ("10 ^ 400", "not a finite number"),
            ("1.2.3", "`1.2.3`"),
            ("__import__('os')", "unexpected `'` at position 12"),
            ("open", "unknown name `open`"),
        ];
        for (input, expected) in cases {
            let err = evaluate(input).expect_err(input).to_string();
            assert!(
                err.contains(expected),
                "{input:?}: {err:?} lacks {expected:?}"
            );
        }
        assert_eq!(evaluate(&"(".repeat(100)), Err(CalcError::TooDeep));
        assert_eq!(evaluate(&"-".repeat(100)), Err(CalcError::TooDeep));
        assert_eq!(evaluate(&"1+".repeat(1500)), Err(CalcError::TooLong));
    }

    #[test]
    fn numbers_print_like_numbers() {
        assert_eq!(to_number(14.0).to_string(), "14");
        assert_eq!(to_number(-3.0).to_string(), "-3");
        assert_eq!(to_number(2.5).to_string(), "2.5");
        assert_eq!(to_number(1e300).to_string(), "1e+300");
    }

    #[tokio::test]
    async fn the_tool_rounds_and_reports_errors() {
        let tool = calculator::tool();
        let ctx = toolgate::context::ToolContext::detached("calculator");
        let out = tool
            .call(
                serde_json::json!({"expression": "2/3", "precision": 3}),
                ctx.clone(),
            )
            .await
            .unwrap();
        assert_eq!(out, serde_json::json!(0.667));
        let out = tool
            .call(serde_json::json!({"expression": "2*(3+4)"}), ctx.clone())
            .await
            .unwrap();
        assert_eq!(out.to_string(), "14");
        let err = tool
            .call(serde_json::json!({"expression": "1/0"}), ctx)
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "division by zero");
    }

    proptest::proptest! {
        /// Any expression text: a number or a positioned error, never a
        /// panic (deep nesting included).
        #[test]
        fn any_expression_is_answered_or_refused(
            text in "[0-9+\\-*/^()!.,% a-z]{0,300}",
            depth in 0usize..5000,
        ) {
            let _ = evaluate(&text);
            let _ = evaluate(&format!("{}{text}{}", "(".repeat(depth), ")".repeat(depth)));
            let _ = evaluate(&format!("{}1", "-".repeat(depth)));
        }
    }
}
