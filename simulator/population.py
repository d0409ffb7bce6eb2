"""Who pays where: a seeded population of cards (home, typical spend) and merchants (location).

Geography: 30 real cities on five continents. Every merchant sits uniformly within
`MERCHANT_RADIUS_KM` of its city's centre (`MERCHANTS_PER_CITY` per city); every card has a home
city (uniform over the cities) and a home point within `HOME_RADIUS_KM` of the centre. A card's
ordinary payments are at merchants of its home city, so any two of them are at most ~30 km apart:
below the 50 km the proximity analyzer ignores, however close together in time. Cities at least
`FAR_KM` apart are where impossible travel goes.

Spend: a card's typical amount (the median of its ordinary payments) is lognormal across cards,
median `TYPICAL_MEDIAN_CENTS` (35.00), sigma `TYPICAL_SIGMA` (0.8), clipped to 3.00 .. 800.00;
so one card typically spends a few euros and another a few hundred. Amounts are minor units of the
card's currency (the home city's), without exchange rates: each card is compared with itself only.
"""
from __future__ import annotations

import math

import numpy as np

# name, latitude, longitude, currency
CITIES: tuple[tuple[str, float, float, str], ...] = (
    ("Paris", 48.8566, 2.3522, "EUR"), ("Berlin", 52.5200, 13.4050, "EUR"),
    ("Madrid", 40.4168, -3.7038, "EUR"), ("Rome", 41.9028, 12.4964, "EUR"),
    ("Amsterdam", 52.3676, 4.9041, "EUR"), ("Vienna", 48.2082, 16.3738, "EUR"),
    ("Lisbon", 38.7223, -9.1393, "EUR"), ("London", 51.5072, -0.1276, "GBP"),
    ("Manchester", 53.4808, -2.2426, "GBP"), ("Stockholm", 59.3293, 18.0686, "SEK"),
    ("Warsaw", 52.2297, 21.0122, "PLN"), ("Zurich", 47.3769, 8.5417, "CHF"),
    ("New York", 40.7128, -74.0060, "USD"), ("Chicago", 41.8781, -87.6298, "USD"),
    ("Los Angeles", 34.0522, -118.2437, "USD"), ("Houston", 29.7604, -95.3698, "USD"),
    ("Toronto", 43.6532, -79.3832, "CAD"), ("Mexico City", 19.4326, -99.1332, "MXN"),
    ("Sao Paulo", -23.5505, -46.6333, "BRL"), ("Buenos Aires", -34.6037, -58.3816, "ARS"),
    ("Tokyo", 35.6762, 139.6503, "JPY"), ("Seoul", 37.5665, 126.9780, "KRW"),
    ("Singapore", 1.3521, 103.8198, "SGD"), ("Sydney", -33.8688, 151.2093, "AUD"),
    ("Mumbai", 19.0760, 72.8777, "INR"), ("Dubai", 25.2048, 55.2708, "AED"),
    ("Johannesburg", -26.2041, 28.0473, "ZAR"), ("Lagos", 6.5244, 3.3792, "NGN"),
    ("Cairo", 30.0444, 31.2357, "EGP"), ("Istanbul", 41.0082, 28.9784, "TRY"),
)
MERCHANTS_PER_CITY = 200
MERCHANT_RADIUS_KM = 12.0
HOME_RADIUS_KM = 10.0
FAR_KM = 3000.0
TYPICAL_MEDIAN_CENTS = 3500
TYPICAL_SIGMA = 0.8
TYPICAL_RANGE_CENTS = (300, 80_000)
EARTH_KM = 6371.0088


def haversine_km(lat1, lon1, lat2, lon2):
    """Great-circle distance in km (numpy arrays or floats)."""
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dp, dl = p2 - p1, np.radians(np.asarray(lon2) - np.asarray(lon1))
    a = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * EARTH_KM * np.arcsin(np.minimum(1.0, np.sqrt(a)))


def scatter(rng: np.random.Generator, lat: np.ndarray, lon: np.ndarray, radius_km: float):
    """Points uniform over a disc of `radius_km` around each (lat, lon)."""
    n = len(lat)
    r = radius_km * np.sqrt(rng.random(n))
    theta = rng.random(n) * 2 * math.pi
    dlat = (r * np.cos(theta)) / 111.32
    dlon = (r * np.sin(theta)) / (111.32 * np.cos(np.radians(lat)))
    return lat + dlat, lon + dlon


class Merchants:
    """`MERCHANTS_PER_CITY` merchants in every city; merchant j of city c has index c*M + j."""

    def __init__(self, rng: np.random.Generator):
        n_cities = len(CITIES)
        city = np.repeat(np.arange(n_cities), MERCHANTS_PER_CITY)
        centre_lat = np.array([c[1] for c in CITIES])[city]
        centre_lon = np.array([c[2] for c in CITIES])[city]
        self.city = city
        self.lat, self.lon = scatter(rng, centre_lat, centre_lon, MERCHANT_RADIUS_KM)
        self.ids = [f"m{c:02d}{j:04d}" for c in range(n_cities) for j in range(MERCHANTS_PER_CITY)]
        self.lat_list = self.lat.tolist()
        self.lon_list = self.lon.tolist()
        lat = np.array([c[1] for c in CITIES])
        lon = np.array([c[2] for c in CITIES])
        dist = haversine_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
        self.far_cities = [np.flatnonzero(dist[c] >= FAR_KM) for c in range(n_cities)]

    def in_city(self, city: int, u: float) -> int:
        """The merchant of `city` that a uniform draw `u` in [0, 1) picks."""
        return city * MERCHANTS_PER_CITY + min(int(u * MERCHANTS_PER_CITY), MERCHANTS_PER_CITY - 1)


class Cards:
    """Cards with a home city, a home point and a typical spend; ids change when a card is reissued."""

    def __init__(self, rng: np.random.Generator, n: int):
        self.city = np.empty(0, dtype=np.int64)
        self.home_lat = np.empty(0)
        self.home_lon = np.empty(0)
        self.typical = np.empty(0)
        self.ids: list[str] = []
        self.keys: list[bytes] = []
        self.generation: list[int] = []
        self.history: list[int] = []  # ordinary payments since the card was (re)issued
        self.grow(rng, n)

    def __len__(self) -> int:
        return len(self.ids)

    def grow(self, rng: np.random.Generator, n: int) -> None:
        """Issue `n` more cards."""
        if n <= 0:
            return
        start = len(self.ids)
        city = rng.integers(0, len(CITIES), n)
        lat, lon = scatter(rng, np.array([c[1] for c in CITIES])[city],
                           np.array([c[2] for c in CITIES])[city], HOME_RADIUS_KM)
        typical = np.clip(np.exp(np.log(TYPICAL_MEDIAN_CENTS) + TYPICAL_SIGMA * rng.standard_normal(n)),
                          *TYPICAL_RANGE_CENTS)
        self.city = np.concatenate([self.city, city])
        self.home_lat = np.concatenate([self.home_lat, lat])
        self.home_lon = np.concatenate([self.home_lon, lon])
        self.typical = np.concatenate([self.typical, typical])
        self.city_list = self.city.tolist()
        self.typical_list = self.typical.tolist()
        for i in range(start, start + n):
            self.ids.append(f"c{i:07d}")
            self.keys.append(self.ids[-1].encode())
            self.generation.append(0)
            self.history.append(0)

    def reissue(self, card: int) -> None:
        """After fraud the issuer blocks the card and issues a new number: a new id, no history."""
        self.generation[card] += 1
        self.ids[card] = f"c{card:07d}r{self.generation[card]}"
        self.keys[card] = self.ids[card].encode()
        self.history[card] = 0

    def currency(self, card: int) -> str:
        return CITIES[self.city_list[card]][3]
