//! What a request asked for that the gateway could not serve or carry to
//! the model, said back to the client.

/// What a face or a model protocol left out of the model's request: each
/// notice once, in the order met. The client sees them (the faces put
/// them in the `X-Toolgate-Notice` header, and where their format has a
/// place for warnings, there); the log has them too.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Notices {
    said: Vec<String>,
    /// Notices for hosted tools, said only when no gateway tool of the
    /// same name serves them: (tool name, notice).
    unless_served: Vec<(String, String)>,
}

impl Notices {
    /// Adds `notice` unless it was said already.
    pub fn add(&mut self, notice: impl Into<String>) {
        let notice = notice.into();
        if !self.said.contains(&notice) {
            self.said.push(notice);
        }
    }

    /// Adds `notice` once the plan is known, unless the tool set in force
    /// has a tool named `tool` (which then serves the client's hosted tool
    /// of that name).
    pub fn unless_served(&mut self, tool: impl Into<String>, notice: impl Into<String>) {
        self.unless_served.push((tool.into(), notice.into()));
    }

    /// Says the notices of hosted tools no gateway tool serves.
    pub fn settle(&mut self, served: impl Fn(&str) -> bool) {
        for (tool, notice) in std::mem::take(&mut self.unless_served) {
            if !served(&tool) {
                self.add(notice);
            }
        }
    }

    /// Adds every notice of `other`, in its order.
    pub fn extend(&mut self, other: Notices) {
        for n in other.said {
            self.add(n);
        }
        self.unless_served.extend(other.unless_served);
    }

    pub fn is_empty(&self) -> bool {
        self.said.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.said.iter().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_notice_is_said_once_and_hosted_tools_only_when_unserved() {
        let mut n = Notices::default();
        n.add("a");
        n.add("a");
        n.unless_served("web_search", "no web search");
        n.unless_served("code", "no code");
        n.settle(|t| t == "web_search");
        assert_eq!(n.iter().collect::<Vec<_>>(), ["a", "no code"]);
    }
}
