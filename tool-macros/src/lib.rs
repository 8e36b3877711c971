//! `#[tool]`: turns a Rust function into a toolgate native tool.
//!
//! ```ignore
//! use toolgate::{ToolError, tool};
//!
//! /// Evaluate an arithmetic expression.
//! #[tool(category = "data", read_only)]
//! async fn calculator(
//!     /// The expression, e.g. "2 * (3 + 4)".
//!     expression: String,
//!     /// Digits after the decimal point.
//!     precision: Option<u8>,
//! ) -> Result<f64, ToolError> {
//!     # todo!()
//! }
//!
//! // The registration: `calculator::tool()`, or a list of them with
//! // `toolgate::tools![calculator, ...]`.
//! ```
//!
//! - The function's doc comment is the tool's description (or
//!   `description = "..."`); each parameter's doc comment describes it.
//! - Parameters become the fields of a generated args struct deriving
//!   `Deserialize` (unknown fields denied) and `schemars::JsonSchema`, whose
//!   schema is the tool's. `Option<T>` is the one way to be optional.
//!   `#[schemars(...)]` on a parameter passes through (e.g. `range`).
//! - A parameter of type `&ToolContext` (or `ToolContext`) is filled by the
//!   gateway and kept out of the schema.
//! - The return type is `T` or `Result<T, E>` with `T: Serialize` and
//!   `E: Display`; an `Err` is an error result the model sees (a
//!   `ToolError` keeps its kind).
//! - Sync functions run on the blocking thread pool.
//! - Attributes: `name` (default: the function's name; must match
//!   `^[A-Za-z0-9_-]{1,64}$`), `description`, `category`, `timeout = "30s"`,
//!   `read_only` (no side effects: results are cached, 5 minutes unless
//!   `cache = "10m"`).
//!
//! Alongside the function, the macro defines a braced struct of the same
//! name (it lives in the type namespace, the function in the value
//! namespace) whose `tool()` returns the registration. Misuse is a compile
//! error pointing at the offending token.

use std::time::Duration;

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprLit, FnArg, GenericArgument, Ident, ItemFn, Lit, LitStr, Meta, Pat,
    PathArguments, ReturnType, Type,
};

/// Turns a function into a native tool; see the crate documentation.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut attrs = ToolAttrs::default();
    let parser = syn::meta::parser(|meta| attrs.parse(meta));
    if let Err(e) = syn::parse::Parser::parse(parser, attr) {
        return with_item(e, item);
    }
    let func = match syn::parse::<ItemFn>(item.clone()) {
        Ok(f) => f,
        Err(e) => return e.to_compile_error().into(),
    };
    match expand(attrs, func.clone()) {
        Ok(tokens) => tokens.into(),
        Err(e) => {
            // Keep the function (without its parameter attributes) when it
            // can stand alone, so that one mistake does not cascade into
            // "cannot find function" errors elsewhere.
            let mut tokens = e.to_compile_error();
            if func.sig.receiver().is_none() {
                let mut func = func;
                strip_param_attrs(&mut func);
                tokens.extend(quote!(#func));
            }
            tokens.into()
        }
    }
}

fn with_item(e: syn::Error, item: TokenStream) -> TokenStream {
    let mut tokens = e.to_compile_error();
    if let Ok(mut func) = syn::parse::<ItemFn>(item)
        && func.sig.receiver().is_none()
    {
        strip_param_attrs(&mut func);
        tokens.extend(quote!(#func));
    }
    tokens.into()
}

fn strip_param_attrs(func: &mut ItemFn) {
    for input in &mut func.sig.inputs {
        if let FnArg::Typed(t) = input {
            t.attrs.clear();
        }
    }
}

/// The attribute's arguments.
#[derive(Default)]
struct ToolAttrs {
    name: Option<LitStr>,
    description: Option<LitStr>,
    category: Option<LitStr>,
    timeout: Option<Duration>,
    read_only: bool,
    cache: Option<(Duration, Span)>,
}

impl ToolAttrs {
    fn parse(&mut self, meta: syn::meta::ParseNestedMeta<'_>) -> syn::Result<()> {
        let path = &meta.path;
        let key = path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        let string = |meta: &syn::meta::ParseNestedMeta<'_>| -> syn::Result<LitStr> {
            meta.value()?.parse::<LitStr>()
        };
        let twice = || syn::Error::new_spanned(path, format!("`{key}` is given twice"));
        match key.as_str() {
            "name" => {
                if self.name.is_some() {
                    return Err(twice());
                }
                let lit = string(&meta)?;
                if !is_valid_name(&lit.value()) {
                    return Err(syn::Error::new_spanned(
                        &lit,
                        format!(
                            "tool name {:?} is invalid: use 1-64 letters, digits, `_` or `-` (^[A-Za-z0-9_-]{{1,64}}$)",
                            lit.value()
                        ),
                    ));
                }
                self.name = Some(lit);
            }
            "description" => {
                if self.description.is_some() {
                    return Err(twice());
                }
                let lit = string(&meta)?;
                if lit.value().trim().is_empty() {
                    return Err(syn::Error::new_spanned(&lit, "the description is empty"));
                }
                self.description = Some(lit);
            }
            "category" => {
                if self.category.is_some() {
                    return Err(twice());
                }
                self.category = Some(string(&meta)?);
            }
            "timeout" => {
                if self.timeout.is_some() {
                    return Err(twice());
                }
                self.timeout = Some(duration(&string(&meta)?)?);
            }
            "cache" => {
                if self.cache.is_some() {
                    return Err(twice());
                }
                let lit = string(&meta)?;
                self.cache = Some((duration(&lit)?, path.span()));
            }
            "read_only" => {
                if self.read_only {
                    return Err(twice());
                }
                if !meta.input.is_empty() && !meta.input.peek(syn::Token![,]) {
                    return Err(meta.error("`read_only` is a flag: write `read_only` alone"));
                }
                self.read_only = true;
            }
            _ => {
                return Err(syn::Error::new_spanned(
                    path,
                    "unknown `#[tool]` argument; expected `name`, `description`, `category`, `timeout`, `read_only` or `cache`",
                ));
            }
        }
        Ok(())
    }
}

fn duration(lit: &LitStr) -> syn::Result<Duration> {
    match humantime::parse_duration(&lit.value()) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(syn::Error::new_spanned(lit, "the duration is zero")),
        Err(e) => Err(syn::Error::new_spanned(
            lit,
            format!(
                "{:?} is not a duration ({e}); write e.g. \"30s\" or \"5m\"",
                lit.value()
            ),
        )),
    }
}

/// OpenAI's rule for function names.
fn is_valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The text of `#[doc]` attributes, one line each, common indentation of
/// one space removed.
fn doc_text(attrs: &[Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .flat_map(|s| {
            // `split`, not `lines`: an empty `///` line must stay a line.
            s.split('\n')
                .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    // Lines wrapped in the source join with a space; blank lines (paragraphs)
    // and list items keep their line breaks.
    let mut out = String::new();
    let mut blank = false;
    for line in &lines {
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            blank = true;
            continue;
        }
        let item = trimmed.starts_with(['-', '*', '|', '#'])
            || trimmed
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !out.is_empty() {
            out.push_str(if blank {
                "\n\n"
            } else if item {
                "\n"
            } else {
                " "
            });
        }
        out.push_str(if item { line.as_str() } else { trimmed });
        blank = false;
    }
    out
}

/// The last segment of a path type, e.g. `Option` for `std::option::Option<T>`.
fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        Type::Group(g) => last_segment(&g.elem),
        Type::Paren(p) => last_segment(&p.elem),
        _ => None,
    }
}

/// How the context parameter is taken.
enum ContextArg {
    Ref,
    Owned,
}

fn context_kind(ty: &Type) -> Option<ContextArg> {
    match ty {
        Type::Reference(r) if r.mutability.is_none() => {
            context_kind(&r.elem).map(|_| ContextArg::Ref)
        }
        _ => last_segment(ty)
            .filter(|s| s.ident == "ToolContext" && s.arguments.is_none())
            .map(|_| ContextArg::Owned),
    }
}

/// The generic arguments of a path type's last segment.
fn generic_types(ty: &Type) -> Vec<&Type> {
    match last_segment(ty).map(|s| &s.arguments) {
        Some(PathArguments::AngleBracketed(args)) => args
            .args
            .iter()
            .filter_map(|a| match a {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn expand(attrs: ToolAttrs, mut func: ItemFn) -> syn::Result<TokenStream2> {
    let sig = &func.sig;
    let ident = sig.ident.clone();
    if let Some(receiver) = sig.receiver() {
        return Err(syn::Error::new_spanned(
            receiver,
            "a tool is a free function: `self` is not allowed (move it out of the `impl` block)",
        ));
    }
    if let Some(unsafety) = &sig.unsafety {
        return Err(syn::Error::new_spanned(
            unsafety,
            "a tool cannot be an `unsafe fn`",
        ));
    }
    if let Some(abi) = &sig.abi {
        return Err(syn::Error::new_spanned(
            abi,
            "a tool cannot have an `extern` ABI",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "a tool cannot be generic: its parameters must have concrete types to give a schema",
        ));
    }
    if let Some(v) = &sig.variadic {
        return Err(syn::Error::new_spanned(v, "a tool cannot be variadic"));
    }

    let ident_name = ident.to_string();
    let fn_name = ident_name
        .strip_prefix("r#")
        .unwrap_or(&ident_name)
        .to_owned();
    let name = match &attrs.name {
        Some(lit) => lit.value(),
        None => {
            if !is_valid_name(&fn_name) {
                return Err(syn::Error::new_spanned(
                    &ident,
                    format!(
                        "tool name {fn_name:?} is invalid: use 1-64 letters, digits, `_` or `-`, or give `name = \"...\"`"
                    ),
                ));
            }
            fn_name.clone()
        }
    };
    let description = match &attrs.description {
        Some(lit) => lit.value(),
        None => doc_text(&func.attrs),
    };
    if description.is_empty() {
        return Err(syn::Error::new_spanned(
            &ident,
            "a tool needs a description: add a doc comment (`/// What it does.`) or `description = \"...\"`",
        ));
    }
    if let Some((_, span)) = attrs.cache
        && !attrs.read_only
    {
        return Err(syn::Error::new(
            span,
            "only a `read_only` tool can be cached: add `read_only`, or remove `cache`",
        ));
    }

    // Parameters.
    let mut fields = Vec::new();
    let mut call_args = Vec::new();
    let mut field_names = Vec::new();
    let mut context: Option<Span> = None;
    for input in &mut func.sig.inputs {
        let FnArg::Typed(param) = input else {
            continue;
        };
        let mut docs = Vec::new();
        let mut passthrough = Vec::new();
        for attr in &param.attrs {
            if attr.path().is_ident("doc") {
                docs.push(attr.clone());
            } else if attr.path().is_ident("schemars") {
                passthrough.push(attr.clone());
            } else {
                return Err(syn::Error::new_spanned(
                    attr,
                    "only doc comments and `#[schemars(...)]` are allowed on a tool's parameters",
                ));
            }
        }
        param.attrs.clear();
        let pat_ident = match &*param.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
            other => {
                return Err(syn::Error::new_spanned(
                    other,
                    "unsupported parameter pattern: a tool's parameters are plain names (`city: String`), since each becomes a JSON property",
                ));
            }
        };
        let ty = &*param.ty;
        if let Some(kind) = context_kind(ty) {
            if context.is_some() {
                return Err(syn::Error::new_spanned(
                    ty,
                    "a tool takes at most one context parameter",
                ));
            }
            context = Some(ty.span());
            call_args.push(match kind {
                ContextArg::Ref => quote!(&__toolgate_ctx),
                ContextArg::Owned => quote!(::std::clone::Clone::clone(&__toolgate_ctx)),
            });
            continue;
        }
        match ty {
            Type::Reference(r) => {
                return Err(syn::Error::new_spanned(
                    r,
                    "a tool's parameters are deserialized from JSON: use an owned type (`String`, not `&str`)",
                ));
            }
            Type::ImplTrait(t) => {
                return Err(syn::Error::new_spanned(
                    t,
                    "a tool's parameters need concrete types: `impl Trait` has no schema",
                ));
            }
            _ => {}
        }
        let doc = doc_text(&docs);
        let description = (!doc.is_empty()).then(|| quote!(#[schemars(description = #doc)]));
        let optional = last_segment(ty)
            .is_some_and(|s| s.ident == "Option")
            .then(|| quote!(#[serde(default)]));
        fields.push(quote! {
            #description
            #optional
            #(#passthrough)*
            #pat_ident: #ty
        });
        field_names.push(pat_ident.clone());
        call_args.push(quote!(#pat_ident));
    }

    // The return type and how its value becomes JSON.
    let convert = match &func.sig.output {
        ReturnType::Default => quote!(::toolgate::native::to_json(__toolgate_out)),
        ReturnType::Type(_, ty) => {
            let is_result = last_segment(ty).is_some_and(|s| s.ident == "Result");
            if is_result {
                let generics = generic_types(ty);
                let ok = match generics.first() {
                    Some(Type::ImplTrait(t)) => {
                        quote_spanned!(t.span()=> ::toolgate::native::to_json(__toolgate_value))
                    }
                    Some(t) => {
                        quote_spanned!(t.span()=> ::toolgate::native::to_json::<#t>(__toolgate_value))
                    }
                    None => {
                        quote_spanned!(ty.span()=> ::toolgate::native::to_json(__toolgate_value))
                    }
                };
                let err = match generics.get(1) {
                    Some(t) if !matches!(t, Type::ImplTrait(_)) => {
                        quote_spanned!(t.span()=> ::toolgate::native::into_tool_error::<#t>(__toolgate_error))
                    }
                    _ => {
                        quote_spanned!(ty.span()=> ::toolgate::native::into_tool_error(__toolgate_error))
                    }
                };
                quote! {
                    match __toolgate_out {
                        ::std::result::Result::Ok(__toolgate_value) => #ok,
                        ::std::result::Result::Err(__toolgate_error) => ::std::result::Result::Err(#err),
                    }
                }
            } else if let Type::ImplTrait(t) = &**ty {
                quote_spanned!(t.span()=> ::toolgate::native::to_json(__toolgate_out))
            } else {
                quote_spanned!(ty.span()=> ::toolgate::native::to_json::<#ty>(__toolgate_out))
            }
        }
    };

    let call = if func.sig.asyncness.is_some() {
        quote!(#ident(#(#call_args),*).await)
    } else {
        quote!(::toolgate::native::blocking(move || #ident(#(#call_args),*)).await?)
    };

    let vis = &func.vis;
    let category = match &attrs.category {
        Some(c) => quote!(::std::option::Option::Some(#c)),
        None => quote!(::std::option::Option::None),
    };
    let duration = |d: Option<Duration>| match d {
        Some(d) => {
            let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
            quote!(::std::option::Option::Some(::std::time::Duration::new(#secs, #nanos)))
        }
        None => quote!(::std::option::Option::None),
    };
    let timeout = duration(attrs.timeout);
    let read_only = attrs.read_only;
    let cache_ttl = duration(if attrs.read_only {
        Some(attrs.cache.map_or(Duration::from_secs(300), |(d, _)| d))
    } else {
        None
    });
    let takes_context = context.is_some();
    let origin = quote_spanned!(ident.span()=> ::std::concat!(::std::file!(), ":", ::std::line!()));
    let struct_doc = format!("The registration of the tool `{name}` (generated by `#[tool]`).");
    let args_ty = Ident::new("__ToolgateArgs", Span::call_site());
    let ctx_binding = if takes_context {
        quote!(__toolgate_ctx)
    } else {
        quote!(_)
    };

    Ok(quote! {
        #func

        #[doc = #struct_doc]
        #[allow(non_camel_case_types, dead_code)]
        #vis struct #ident {}

        impl #ident {
            /// The tool's registration, for the catalog.
            #vis fn tool() -> ::toolgate::native::NativeTool {
                #[derive(
                    ::toolgate::native::__private::serde::Deserialize,
                    ::toolgate::native::__private::schemars::JsonSchema
                )]
                #[serde(crate = "::toolgate::native::__private::serde", deny_unknown_fields)]
                #[schemars(crate = "::toolgate::native::__private::schemars")]
                #[allow(non_camel_case_types)]
                struct #args_ty {
                    #(#fields,)*
                }

                fn __toolgate_handler(
                    __toolgate_args: ::toolgate::native::__private::serde_json::Value,
                    #ctx_binding: ::toolgate::context::ToolContext,
                ) -> ::toolgate::native::HandlerFuture {
                    ::std::boxed::Box::pin(async move {
                        let #args_ty { #(#field_names,)* } =
                            ::toolgate::native::parse_args::<#args_ty>(__toolgate_args)?;
                        let __toolgate_out = #call;
                        #convert
                    })
                }

                ::toolgate::native::NativeTool {
                    name: #name,
                    description: ::std::string::String::from(#description),
                    category: #category,
                    timeout: #timeout,
                    read_only: #read_only,
                    cache_ttl: #cache_ttl,
                    takes_context: #takes_context,
                    builtin: false,
                    origin: #origin,
                    schema: ::toolgate::native::schema_of::<#args_ty>,
                    handler: __toolgate_handler,
                }
            }
        }
    })
}
