//! `get_weather`: the seeds' **simulated** weather. The numbers are derived
//! from the place's name (the same place always gets the same weather);
//! nothing is fetched. For real forecasts, the shipped configuration has the
//! `get_forecast` HTTP tool (Open-Meteo).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::tool;

use toolgate::ToolError;

/// Temperature unit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TemperatureUnit {
    #[default]
    Celsius,
    Fahrenheit,
}

const CONDITIONS: &[&str] = &[
    "sunny",
    "partly cloudy",
    "cloudy",
    "light rain",
    "rain",
    "thunderstorms",
    "fog",
    "snow",
];

/// SIMULATED weather for a place (deterministic demo data, not a real
/// forecast): temperature, condition, humidity and wind.
#[tool(category = "demo", read_only)]
pub fn get_weather(
    /// The place, e.g. "Lyon" or "Tokyo, Japan".
    location: String,
    /// `celsius` (default) or `fahrenheit`.
    unit: Option<TemperatureUnit>,
) -> Result<Value, ToolError> {
    let place = location.trim();
    if place.is_empty() {
        return Err(ToolError::Failed("the location is empty".into()));
    }
    let h = fnv1a(place.to_lowercase().as_bytes());
    let celsius = (h % 451) as f64 / 10.0 - 10.0; // -10.0 ..= 35.0
    let condition = CONDITIONS[((h >> 16) % CONDITIONS.len() as u64) as usize];
    let condition = if celsius > 2.0 && condition == "snow" {
        "cloudy"
    } else {
        condition
    };
    let humidity = 20 + (h >> 24) % 76; // 20 ..= 95 %
    let wind_kph = ((h >> 32) % 400) as f64 / 10.0; // 0 ..= 39.9
    let unit = unit.unwrap_or_default();
    let temperature = match unit {
        TemperatureUnit::Celsius => celsius,
        TemperatureUnit::Fahrenheit => ((celsius * 9.0 / 5.0 + 32.0) * 10.0).round() / 10.0,
    };
    Ok(json!({
        "location": place,
        "temperature": temperature,
        "unit": unit,
        "condition": condition,
        "humidity_percent": humidity,
        "wind_kph": wind_kph,
        "simulated": true,
    }))
}

/// FNV-1a, 64 bits: a fixed hash, so the weather never changes between
/// builds or runs.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_plausible() {
        let a = get_weather("Lyon".into(), None).unwrap();
        let b = get_weather("  lyon ".into(), None).unwrap();
        assert_eq!(a["temperature"], b["temperature"]);
        assert_eq!(a["condition"], b["condition"]);
        assert_eq!(a["simulated"], json!(true));
        let t = a["temperature"].as_f64().unwrap();
        assert!((-10.0..=35.0).contains(&t));
        let f = get_weather("Lyon".into(), Some(TemperatureUnit::Fahrenheit)).unwrap();
        let tf = f["temperature"].as_f64().unwrap();
        assert!(
            (tf - (t * 9.0 / 5.0 + 32.0)).abs() < 0.06,
            "{t} C vs {tf} F"
        );
        assert_eq!(f["unit"], json!("fahrenheit"));
        // Different places, different weather (for these two at least).
        let tokyo = get_weather("Tokyo".into(), None).unwrap();
        assert_ne!(a, tokyo);
        assert!(get_weather("  ".into(), None).is_err());
    }
}
