//! What a template's text shows of its cost before it runs: a string built from literals
//! (`'x' * 100000000`, or literals joined with `~` or `+`) longer than [`MAX_LITERAL_BYTES`] is
//! refused. The template engine folds such constants when it compiles a template, so this check
//! reads the parsed syntax tree, before anything is compiled (or allocated).

use minijinja::machinery::ast::{BinOpKind, CallArg, Expr, Stmt, UnaryOpKind};
use minijinja::machinery::{WhitespaceConfig, parse};

/// The longest string a template may build from literals alone.
pub const MAX_LITERAL_BYTES: u128 = 64 * 1024;

/// What an expression is known to be before it runs.
#[derive(Clone, Copy)]
enum Known {
    /// A string of this many bytes.
    Text(u128),
    /// This integer.
    Int(i128),
    /// Anything else, or not known.
    Unknown,
}

/// Checks `src`: Ok when it does not parse (the compiler says why) or builds no string from
/// literals past [`MAX_LITERAL_BYTES`]; else what it builds.
pub fn check_literals(src: &str) -> Result<(), String> {
    match parse(
        src,
        "<template>",
        // (A unit struct unless the engine is built with custom syntax.)
        Default::default(),
        WhitespaceConfig::default(),
    ) {
        Ok(tree) => stmt(&tree),
        Err(_) => Ok(()),
    }
}

fn stmts(body: &[Stmt<'_>]) -> Result<(), String> {
    body.iter().try_for_each(stmt)
}

fn exprs<'a>(items: impl IntoIterator<Item = &'a Expr<'a>>) -> Result<(), String> {
    items.into_iter().try_for_each(|e| expr(e).map(|_| ()))
}

fn args(list: &[CallArg<'_>]) -> Result<(), String> {
    list.iter().try_for_each(|a| match a {
        CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) | CallArg::KwargSplat(e) => {
            expr(e).map(|_| ())
        }
    })
}

fn stmt(s: &Stmt<'_>) -> Result<(), String> {
    match s {
        Stmt::Template(t) => stmts(&t.children),
        Stmt::EmitExpr(e) => expr(&e.expr).map(|_| ()),
        Stmt::EmitRaw(_) => Ok(()),
        Stmt::ForLoop(f) => {
            exprs([&f.target, &f.iter])?;
            exprs(f.filter_expr.iter())?;
            stmts(&f.body)?;
            stmts(&f.else_body)
        }
        Stmt::IfCond(c) => {
            expr(&c.expr)?;
            stmts(&c.true_body)?;
            stmts(&c.false_body)
        }
        Stmt::WithBlock(w) => {
            for (target, value) in &w.assignments {
                exprs([target, value])?;
            }
            stmts(&w.body)
        }
        Stmt::Set(s) => exprs([&s.target, &s.expr]),
        Stmt::SetBlock(s) => {
            expr(&s.target)?;
            exprs(s.filter.iter())?;
            stmts(&s.body)
        }
        Stmt::AutoEscape(a) => {
            expr(&a.enabled)?;
            stmts(&a.body)
        }
        Stmt::FilterBlock(f) => {
            expr(&f.filter)?;
            stmts(&f.body)
        }
        Stmt::Block(b) => stmts(&b.body),
        Stmt::Import(i) => exprs([&i.expr, &i.name]),
        Stmt::FromImport(i) => {
            expr(&i.expr)?;
            for (name, alias) in &i.names {
                expr(name)?;
                exprs(alias.iter())?;
            }
            Ok(())
        }
        Stmt::Extends(e) => expr(&e.name).map(|_| ()),
        Stmt::Include(i) => expr(&i.name).map(|_| ()),
        Stmt::Macro(m) => {
            exprs(m.args.iter().chain(m.defaults.iter()))?;
            stmts(&m.body)
        }
        Stmt::CallBlock(c) => {
            expr(&c.call.expr)?;
            args(&c.call.args)?;
            exprs(c.macro_decl.args.iter().chain(c.macro_decl.defaults.iter()))?;
            stmts(&c.macro_decl.body)
        }
        Stmt::Do(d) => {
            expr(&d.call.expr)?;
            args(&d.call.args)
        }
    }
}

/// What `e` is known to be, after checking every expression in it.
fn expr(e: &Expr<'_>) -> Result<Known, String> {
    let known = match e {
        Expr::Const(c) => match (c.value.as_str(), i128::try_from(c.value.clone())) {
            (Some(s), _) => Known::Text(s.len() as u128),
            (None, Ok(n)) => Known::Int(n),
            (None, Err(_)) => Known::Unknown,
        },
        Expr::Var(_) => Known::Unknown,
        Expr::Slice(s) => {
            expr(&s.expr)?;
            exprs(s.start.iter().chain(s.stop.iter()).chain(s.step.iter()))?;
            Known::Unknown
        }
        Expr::UnaryOp(u) => match (&u.op, expr(&u.expr)?) {
            (UnaryOpKind::Neg, Known::Int(n)) => Known::Int(n.saturating_neg()),
            _ => Known::Unknown,
        },
        Expr::BinOp(b) => {
            let (left, right) = (expr(&b.left)?, expr(&b.right)?);
            combine(b.op, left, right)
        }
        Expr::Compare(c) => {
            expr(&c.expr)?;
            exprs(c.ops.iter().map(|o| &o.expr))?;
            Known::Unknown
        }
        Expr::IfExpr(i) => {
            exprs([&i.test_expr, &i.true_expr])?;
            exprs(i.false_expr.iter())?;
            Known::Unknown
        }
        Expr::Filter(f) => {
            exprs(f.expr.iter())?;
            args(&f.args)?;
            Known::Unknown
        }
        Expr::Test(t) => {
            expr(&t.expr)?;
            args(&t.args)?;
            Known::Unknown
        }
        Expr::GetAttr(g) => {
            expr(&g.expr)?;
            Known::Unknown
        }
        Expr::GetItem(g) => {
            exprs([&g.expr, &g.subscript_expr])?;
            Known::Unknown
        }
        Expr::Call(c) => {
            expr(&c.expr)?;
            args(&c.args)?;
            Known::Unknown
        }
        Expr::List(l) => {
            exprs(l.items.iter())?;
            Known::Unknown
        }
        Expr::Map(m) => {
            exprs(m.keys.iter().chain(m.values.iter()))?;
            Known::Unknown
        }
    };
    match known {
        Known::Text(len) if len > MAX_LITERAL_BYTES => Err(format!(
            "builds a string of {len} bytes from literals (at most {MAX_LITERAL_BYTES})"
        )),
        known => Ok(known),
    }
}

/// What a binary operator makes of two known operands (as the template engine computes it).
fn combine(op: BinOpKind, left: Known, right: Known) -> Known {
    use Known::{Int, Text, Unknown};
    match (op, left, right) {
        (BinOpKind::Mul, Text(len), Int(n)) | (BinOpKind::Mul, Int(n), Text(len)) => {
            Text(len.saturating_mul(u128::try_from(n).unwrap_or(0)))
        }
        (BinOpKind::Mul, Int(a), Int(b)) => Int(a.saturating_mul(b)),
        (BinOpKind::Add, Int(a), Int(b)) => Int(a.saturating_add(b)),
        (BinOpKind::Add | BinOpKind::Concat, Text(a), Text(b)) => Text(a.saturating_add(b)),
        // `~` writes a number as its digits: at most 40 bytes.
        (BinOpKind::Concat, Text(a), Int(_)) | (BinOpKind::Concat, Int(_), Text(a)) => {
            Text(a.saturating_add(40))
        }
        _ => Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_built_from_literals_past_the_bound_is_refused() {
        for src in [
            "{{ 'x' * 100000000 }}",
            "{% for a in 'x' * 100 %}{{ 'x' * 100000000 }}{% endfor %}",
            "{% if ('ab' * 1000) * 1000 %}y{% endif %}",
            "{{ inputs.a | default(100000000 * 'x') }}",
            "{% set y = 'x' * 40000 ~ 'x' * 40000 %}",
            "{{ f('x' * 70000) }}",
        ] {
            let why = check_literals(src).expect_err(src);
            assert!(why.contains("from literals"), "{src}: {why}");
        }
    }

    #[test]
    fn ordinary_templates_pass() {
        for src in [
            "{{ '-' * 40 }}",
            "{{ inputs.n * 100000000 }}",
            "{{ 3 * 100000000 }}",
            "{% for x in steps.a.output | split(',') %}{{ x | shell_quote }} {% endfor %}",
            "{{ oops }",
        ] {
            assert_eq!(check_literals(src), Ok(()), "{src}");
        }
    }
}
