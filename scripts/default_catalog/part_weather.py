from common import API_KEY, A, B, I, N, O, R, S, api, tool

CAT = "Weather"

LAT = N("Latitude in decimal degrees.", minimum=-90, maximum=90)
LON = N("Longitude in decimal degrees.", minimum=-180, maximum=180)
UNITS = S("Unit system.", enum=["metric", "imperial"], default="metric")

SKYCAST = tool("SkyCast Weather", CAT,
    "Weather data by coordinates: current conditions, hourly and 10-day forecasts, air quality and official alerts.",
    [
        api("current_weather", "Current temperature, feels-like, humidity, wind and sky condition at a latitude/longitude.",
            {"api_key": API_KEY, "latitude": LAT, "longitude": LON, "units": UNITS}, ["api_key", "latitude", "longitude"],
            R(temperature=N("Air temperature."), feels_like=N("Apparent temperature."), humidity=I("Relative humidity %."),
              wind_speed=N("Wind speed."), condition=S("Summary such as 'light rain'."))),
        api("forecast_daily", "Day-by-day forecast for up to 10 days: highs, lows, precipitation chance and summary.",
            {"api_key": API_KEY, "latitude": LAT, "longitude": LON, "days": I("Days ahead.", default=7, minimum=1, maximum=10),
             "units": UNITS}, ["api_key", "latitude", "longitude"],
            R(days=A(O("Day.", date=S("Date."), high=N("Max."), low=N("Min."), precipitation_probability=I("%.")), "Days."))),
        api("forecast_hourly", "Hour-by-hour forecast for the next 48 hours.",
            {"api_key": API_KEY, "latitude": LAT, "longitude": LON, "hours": I("Hours ahead.", default=24, maximum=48), "units": UNITS},
            ["api_key", "latitude", "longitude"],
            R(hours=A(O("Hour.", time=S("Time."), temperature=N("Temp."), precipitation_mm=N("Rain.")), "Hours."))),
        api("air_quality", "Air quality index and pollutant concentrations (PM2.5, PM10, ozone, NO2).",
            {"api_key": API_KEY, "latitude": LAT, "longitude": LON}, ["api_key", "latitude", "longitude"],
            R(aqi=I("Air quality index."), category=S("Good, moderate, unhealthy, ..."), pm25=N("PM2.5 in µg/m³."))),
        api("weather_alerts", "Active severe-weather warnings issued by national services for an area (storms, floods, heat).",
            {"api_key": API_KEY, "latitude": LAT, "longitude": LON}, ["api_key", "latitude", "longitude"],
            R(alerts=A(O("Alert.", event=S("Event."), severity=S("Severity."), expires=S("End.")), "Alerts."))),
        api("uv_index", "UV index now and the daily maximum with sun-protection advice.",
            {"api_key": API_KEY, "latitude": LAT, "longitude": LON}, ["api_key", "latitude", "longitude"],
            R(uv_index=N("Current UV index."), max_today=N("Daily maximum."))),
        api("historical_weather", "Observed weather on a past date at a location.",
            {"api_key": API_KEY, "latitude": LAT, "longitude": LON, "date": S("YYYY-MM-DD.", format="date"), "units": UNITS},
            ["api_key", "latitude", "longitude", "date"], R(high=N("Max."), low=N("Min."), precipitation_mm=N("Rain."))),
    ])

METEORA = tool("Meteora", CAT,
    "Hyperlocal meteorology service keyed by place name: conditions, outlooks, severe warnings, pollen and astronomy.",
    [
        api("get_conditions", "What it's like outside right now in a town or city: temperature, wind, rain and cloud cover.",
            {"token": S("Meteora subscription token."), "place": S("Town, city or postcode."), "units": UNITS}, ["token", "place"],
            R(temp_c=N("Temperature °C."), wind_kph=N("Wind km/h."), description=S("Conditions text."))),
        api("get_outlook", "Multi-day outlook for a place: expected rain, sunshine and temperature range per day.",
            {"token": S("Meteora subscription token."), "place": S("Town, city or postcode."), "days": I("Days, 1-14.", default=5)},
            ["token", "place"], R(outlook=A(O("Day.", date=S("Date."), max_c=N("Max."), min_c=N("Min."), rain_chance=I("%.")), "Days."))),
        api("get_hourly_outlook", "Hourly outlook for the rest of today and tomorrow for a place.",
            {"token": S("Meteora subscription token."), "place": S("Town, city or postcode.")}, ["token", "place"],
            R(hours=A(O("Hour.", time=S("Time."), temp_c=N("Temp.")), "Hours."))),
        api("severe_warnings", "Storm, flood, snow and heat warnings currently in force for a region.",
            {"token": S("Meteora subscription token."), "place": S("Town, city or region.")}, ["token", "place"],
            R(warnings=A(O("Warning.", type=S("Hazard."), level=S("Level."), valid_until=S("End.")), "Warnings."))),
        api("pollen_report", "Pollen counts by type (grass, tree, weed) and an allergy risk level for hay-fever sufferers.",
            {"token": S("Meteora subscription token."), "place": S("Town or city.")}, ["token", "place"],
            R(grass=I("Count."), tree=I("Count."), weed=I("Count."), risk=S("Risk level.", enum=["low", "moderate", "high", "very_high"]))),
        api("sun_and_moon", "Sunrise, sunset, day length and moon phase for a place and date.",
            {"token": S("Meteora subscription token."), "place": S("Town or city."), "date": S("YYYY-MM-DD.", format="date")},
            ["token", "place"], R(sunrise=S("Local time."), sunset=S("Local time."), moon_phase=S("Phase."))),
        api("marine_forecast", "Wave height, swell, water temperature and tides for a coastal spot — for sailors and surfers.",
            {"token": S("Meteora subscription token."), "place": S("Beach, harbour or coastal town."),
             "include_tides": B("Add tide times.", default=True)},
            ["token", "place"], R(wave_height_m=N("Wave height."), water_temp_c=N("Water temp."), tides=A(S("Tide time."), "Tides."))),
    ])

TOOLS = [SKYCAST, METEORA]
